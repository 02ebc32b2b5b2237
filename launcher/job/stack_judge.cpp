#include "launcher/job/stack_judge.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <set>

namespace muster {

bool is_python_frame(const std::string& frame) {
  // "name (file.py:12)"
  const auto open = frame.rfind(" (");
  return open != std::string::npos && frame.find(".py", open) != std::string::npos;
}

std::string innermost_frames(const std::vector<std::string>& path, size_t frames) {
  std::string out;
  for (size_t i = 0; i < path.size() && i < frames; ++i) {
    if (!out.empty()) out += " <- ";
    out += path[path.size() - 1 - i];
  }
  return out.empty() ? "no frame" : out;
}

// Where in `path` the frame that names it is (see place_name); path.size() for none.
size_t naming_frame(const std::vector<std::string>& path) {
  for (size_t i = path.size(); i-- > 0;)
    if (is_python_frame(path[i])) return i;
  // A C program's MPI call: the outermost MPI entry point is the one it made.
  for (size_t i = 0; i < path.size(); ++i)
    if (path[i].rfind("MPI_", 0) == 0 || path[i].rfind("PMPI_", 0) == 0) return i;
  return path.empty() ? 0 : path.size() - 1;
}

std::string place_name(const std::vector<std::string>& path) {
  return path.empty() ? "no frame" : path[naming_frame(path)];
}

StackVerdict judge_stacks(const StackReport& report) {
  StackVerdict verdict;
  std::set<int> gone;
  for (const auto& [rank, how] : report.ended) gone.insert(rank);
  for (const auto& r : report.stacks.ranks) {
    if (r.state == ProcessStacks::State::Gone) gone.insert(r.rank);
    else if (r.state == ProcessStacks::State::Failed) verdict.unread.push_back({r.rank, r.note});
  }
  verdict.gone.assign(gone.begin(), gone.end());
  // Each read rank's path, from the places its main thread is in.
  std::map<int, const std::vector<std::string>*> path_of;
  for (const auto& place : report.stacks.main)
    for (int rank : place.ranks) path_of[rank] = &place.path;
  verdict.read = int(path_of.size());
  // The majority's place is the longest call path more than half of the read ranks share, as
  // STAT's tree shows it: ranks that spin in a wait (MPICH's progress loop) differ in their
  // innermost frames but not in the call they wait in.
  std::vector<int> sharing;
  for (const auto& [rank, path] : path_of) sharing.push_back(rank);
  std::vector<std::string> prefix;
  for (size_t depth = 0;; ++depth) {
    std::map<std::string, std::vector<int>> next;
    for (int rank : sharing)
      if (path_of[rank]->size() > depth) next[(*path_of[rank])[depth]].push_back(rank);
    const auto most = std::max_element(next.begin(), next.end(), [](const auto& a, const auto& b) {
      return a.second.size() < b.second.size();
    });
    if (most == next.end() || 2 * most->second.size() <= size_t(verdict.read)) break;
    prefix.push_back(most->first);
    sharing = most->second;
  }
  if (!prefix.empty()) {
    // A rank caught elsewhere inside the same call (the same collective, another frame of its
    // wait) is with the others: only a rank that left the path above that call is elsewhere.
    const size_t call = naming_frame(prefix);
    std::vector<int> together;
    for (const auto& [rank, path] : path_of) {
      const bool in_the_call = std::binary_search(sharing.begin(), sharing.end(), rank) ||
                               (path->size() > call && std::equal(prefix.begin(), prefix.begin() + long(call) + 1,
                                                                  path->begin()));
      if (in_the_call) together.push_back(rank);
      else verdict.elsewhere.push_back({rank, *path});
    }
    verdict.majority = StackClass{prefix, together, 0};
  }
  verdict.all_in_one_place = verdict.majority && verdict.elsewhere.empty() && verdict.read > 1;
  return verdict;
}

}  // namespace muster
