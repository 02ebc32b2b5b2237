// Host lists in the bracket syntax of pdsh, Slurm and ClusterShell: "gpu[01-16]",
// "r[1-2]n[001-004]", "a,b,c[1,3,5-7]".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace muster {

// The most hosts one host list may name; more is almost surely a typo ("n[1-1000000]").
inline constexpr std::size_t kMaxHostListSize = 100000;

// Expands a host list into names in the order written, duplicates kept (callers that
// care, like the cluster file, report them). Throws Error(Config) quoting the input.
std::vector<std::string> expand_hostlist(std::string_view text);

// Folds names into the shortest bracket form, sorted and deduplicated exactly as
// ClusterShell's `nodeset -f` does (numbers keep their zero padding).
std::string fold_hostlist(const std::vector<std::string>& names);

// The names as a set, in the order ClusterShell's `nodeset -e` prints them.
std::vector<std::string> sort_hostlist(const std::vector<std::string>& names);

// Splits "a,b[1,2]:4,c" at the commas that are outside brackets.
std::vector<std::string> split_outside_brackets(std::string_view text, char separator);

}  // namespace muster
