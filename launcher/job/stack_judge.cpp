#include "launcher/job/stack_judge.h"

#include <algorithm>
#include <set>

namespace muster {
namespace {

bool is_python_frame(const std::string& frame) {
  // "name (file.py:12)"
  const auto open = frame.rfind(" (");
  return open != std::string::npos && frame.find(".py", open) != std::string::npos;
}

}  // namespace

std::string innermost_frames(const std::vector<std::string>& path, size_t frames) {
  std::string out;
  for (size_t i = 0; i < path.size() && i < frames; ++i) {
    if (!out.empty()) out += " <- ";
    out += path[path.size() - 1 - i];
  }
  return out.empty() ? "no frame" : out;
}

std::string place_name(const std::vector<std::string>& path) {
  for (auto it = path.rbegin(); it != path.rend(); ++it)
    if (is_python_frame(*it)) return *it;
  return path.empty() ? "no frame" : path.back();
}

StackVerdict judge_stacks(const StackReport& report) {
  StackVerdict verdict;
  verdict.places = report.stacks.main;
  std::set<int> gone;
  for (const auto& [rank, how] : report.ended) gone.insert(rank);
  for (const auto& r : report.stacks.ranks) {
    if (r.state == ProcessStacks::State::Gone) gone.insert(r.rank);
    else if (r.state == ProcessStacks::State::Failed) verdict.unread.push_back({r.rank, r.note});
  }
  verdict.gone.assign(gone.begin(), gone.end());
  for (const auto& place : verdict.places) verdict.read += int(place.ranks.size());
  if (!verdict.places.empty() && 2 * verdict.places.front().ranks.size() > size_t(verdict.read) &&
      (verdict.places.size() == 1 || verdict.places[1].ranks.size() < verdict.places.front().ranks.size()))
    verdict.majority = verdict.places.front();
  verdict.all_in_one_place = verdict.places.size() == 1 && verdict.read > 1;
  if (verdict.majority)
    for (size_t i = 1; i < verdict.places.size(); ++i)
      for (int rank : verdict.places[i].ranks) verdict.elsewhere.push_back({rank, verdict.places[i].path});
  std::sort(verdict.elsewhere.begin(), verdict.elsewhere.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return verdict;
}

}  // namespace muster
