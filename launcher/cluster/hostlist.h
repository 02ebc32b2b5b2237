// Host lists in the bracket syntax of pdsh, Slurm and ClusterShell: "gpu[01-16]",
// "r[1-2]n[001-004]", "a,b,c[1,3,5-7]".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace muster {

// The most hosts one input (a cluster file, a hostfile, -H, the arguments of `muster
// hostlist`) may name in all; more is almost surely a typo ("n[1-1000000]").
inline constexpr std::size_t kMaxHostListSize = 100000;

// How many host names an input has named so far, across all its host lists, so that the
// limit holds for the whole input and not per list.
class HostBudget {
 public:
  // Counts `n` more names for `text`; throws Error(Config) quoting it past the limit.
  void spend(std::size_t n, std::string_view text);
  std::size_t used() const { return used_; }

 private:
  std::size_t used_ = 0;
};

// Expands a host list into names in the order written, duplicates kept (callers that
// care, like the cluster file, report them). Sizes are computed with overflow-checked
// arithmetic before anything is expanded; the names count against `budget` (a fresh one
// when none is given). Throws Error(Config) quoting the input.
std::vector<std::string> expand_hostlist(std::string_view text, HostBudget* budget = nullptr);

// Folds names into the shortest bracket form, sorted and deduplicated exactly as
// ClusterShell's `nodeset -f` does (numbers keep their zero padding).
std::string fold_hostlist(const std::vector<std::string>& names);

// The names as a set, in the order ClusterShell's `nodeset -e` prints them.
std::vector<std::string> sort_hostlist(const std::vector<std::string>& names);

// Splits "a,b[1,2]:4,c" at the commas that are outside brackets.
std::vector<std::string> split_outside_brackets(std::string_view text, char separator);

}  // namespace muster
