#include "topology/cpu_list.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "launcher/error.h"

namespace muster {
namespace {
int parse_cpu(std::string_view whole, std::string_view digits) {
  int value = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || value < 0)
    throw Error(ErrorKind::Config, fmt::format("CPU list '{}': '{}' is not a CPU number", whole,
                                               digits));
  return value;
}
}  // namespace

std::vector<int> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    std::string_view part = text.substr(start, comma == std::string_view::npos ? text.npos
                                                                              : comma - start);
    size_t dash = part.find('-');
    int low = parse_cpu(text, part.substr(0, dash));
    int high = dash == std::string_view::npos ? low : parse_cpu(text, part.substr(dash + 1));
    if (high < low)
      throw Error(ErrorKind::Config, fmt::format("CPU list '{}': range '{}' runs backwards",
                                                 text, part));
    for (int c = low; c <= high; ++c) cpus.push_back(c);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace muster
