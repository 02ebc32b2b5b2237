// CPU sets written as Linux CPU lists ("0-3,8,10-11"), as in /sys and `taskset -c`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace muster {

// Parses a CPU list into sorted, unique CPU numbers. Throws Error(Config) quoting it.
std::vector<int> parse_cpu_list(std::string_view text);

// Writes sorted CPU numbers as a CPU list, e.g. {0,1,2,3,8} -> "0-3,8".
std::string format_cpu_list(const std::vector<int>& cpus);

}  // namespace muster
