#include "cli/stack_report_text.h"

#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/cluster/hostlist.h"
#include "launcher/job/stack_judge.h"

namespace muster::cli {
namespace {

// How much of a place the text shows: the innermost native frames (what it waits on) and
// the innermost Python frames (the program's lines); --json has every frame.
constexpr size_t kNativeShown = 3;
constexpr size_t kPythonShown = 4;
constexpr size_t kFramesShownWithoutPython = 8;

const std::string& rank_host(const StackReport& report, int rank) {
  static const std::string unknown = "?";
  return rank >= 0 && size_t(rank) < report.host_of_rank.size() ? report.host_of_rank[size_t(rank)] : unknown;
}

std::string hosts_of(const StackReport& report, const std::vector<int>& ranks) {
  std::set<std::string> hosts;
  for (int r : ranks) hosts.insert(rank_host(report, r));
  return fold_hostlist({hosts.begin(), hosts.end()});
}

std::string when_text(StacksWhen when) {
  switch (when) {
    case StacksWhen::Timeout: return "at the timeout";
    case StacksWhen::Stall: return "when no rank had written a line for the --stall time";
    case StacksWhen::Request: return "on request";
  }
  return "";
}

// A place's frames, innermost first, as the text shows them.
std::vector<std::string> shown_frames(const std::vector<std::string>& path) {
  std::vector<std::string> out;
  size_t python = 0;
  for (const auto& f : path) python += is_python_frame(f);
  if (python == 0) {
    for (size_t i = 0; i < path.size() && i < kFramesShownWithoutPython; ++i) out.push_back(path[path.size() - 1 - i]);
    if (path.size() > kFramesShownWithoutPython) out.push_back("...");
    return out;
  }
  size_t native = 0, py = 0;
  bool skipped = false;
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    const bool is_python = is_python_frame(*it);
    if ((is_python && py < kPythonShown) || (!is_python && native < kNativeShown && py == 0)) {
      if (skipped) out.push_back("...");
      skipped = false;
      out.push_back(*it);
      (is_python ? py : native)++;
    } else {
      skipped = true;
    }
  }
  if (skipped) out.push_back("...");
  return out;
}

// What NCCL's RAS service said: each distinct answer once, with the nodes that gave it (every
// node's service speaks for the whole job, so they mostly agree).
std::string ras_text(const std::vector<RasSummary>& answers) {
  std::map<std::pair<std::vector<std::string>, std::string>, std::set<std::string>> by_answer;
  for (const auto& a : answers) by_answer[{a.lines, a.error}].insert(a.host);
  std::string out;
  for (const auto& [answer, hosts] : by_answer) {
    const auto& [lines, error] = answer;
    const std::string where = fold_hostlist({hosts.begin(), hosts.end()});
    if (lines.empty() && !error.empty())
      out += fmt::format("  NCCL's RAS service could not be asked on {}: {}\n", where, error);
    else if (lines.empty())
      out += fmt::format("  NCCL's RAS service (asked on {}) reports no errors or warnings\n", where);
    else
      out += fmt::format("  NCCL's RAS service (asked on {}) reports{}:\n", where, error.empty() ? "" : " (" + error + ")");
    for (const auto& line : lines) out += fmt::format("      {}\n", line);
  }
  return out;
}

std::string flight_recorder_text(const StackReport& report) {
  std::string out;
  std::vector<int> kept;
  std::set<std::string> dirs;
  for (const auto& d : report.stacks.flight_recorder)
    if (!d.file.empty()) {
      kept.push_back(d.rank);
      dirs.insert(d.file.substr(0, d.file.rfind('/') + 1));
    }
  if (!kept.empty())
    out += fmt::format("  torch's flight recorder: the dump{} of rank{} {} collected in {}\n", kept.size() == 1 ? "" : "s",
                       kept.size() == 1 ? "" : "s", rank_ranges(kept), fmt::join(dirs, ", "));
  for (const auto& d : report.stacks.flight_recorder)
    if (!d.note.empty())
      out += fmt::format("  note: rank {}'s flight recorder ({}): {}\n", d.rank, d.host, d.note);
  return out;
}

}  // namespace

std::string stack_report_text(const StackReport& report) {
  const StackVerdict verdict = judge_stacks(report);
  std::string out;
  std::set<int> all;
  for (const auto& r : report.stacks.ranks) all.insert(r.rank);
  for (const auto& [r, how] : report.ended) all.insert(r);
  out += fmt::format("muster: stacks of {} rank{} on {}, read {}:\n", all.size(), all.size() == 1 ? "" : "s",
                     hosts_of(report, {all.begin(), all.end()}), when_text(report.when));
  if (verdict.majority) {
    const size_t others = verdict.majority->ranks.size();
    for (const auto& e : verdict.elsewhere)
      out += fmt::format("  rank {} ({}) is not in {}, where the {} other rank{} wait: it is in {}\n", e.rank,
                         rank_host(report, e.rank), place_name(verdict.majority->path), others,
                         others == 1 ? "" : "s", innermost_frames(e.path));
  }
  std::map<int, std::string> how_ended(report.ended.begin(), report.ended.end());
  for (int rank : verdict.gone)
    out += fmt::format("  rank {} ({}) has ended{} while the others run: it is gone, not stuck\n", rank,
                       rank_host(report, rank), how_ended.count(rank) ? " (" + how_ended[rank] + ")" : "");
  for (const auto& [rank, why] : verdict.unread)
    out += fmt::format("  rank {} ({}) could not be read: {}\n", rank, rank_host(report, rank), why);
  for (const auto& host : report.unanswered) out += fmt::format("  {} did not answer in time\n", host);
  if (verdict.all_in_one_place)
    out += fmt::format("  all {} ranks read wait in the same place: {}\n", verdict.read,
                       place_name(verdict.majority->path));
  else if (!verdict.majority && report.stacks.main.size() > 1)
    out += fmt::format("  the ranks are in {} places and no place holds most of them\n", report.stacks.main.size());
  for (const auto& place : report.stacks.main) {
    out += fmt::format("  rank{} {} on {}:\n", place.ranks.size() == 1 ? "" : "s", rank_ranges(place.ranks),
                       hosts_of(report, place.ranks));
    for (const auto& frame : shown_frames(place.path)) out += fmt::format("      {}\n", frame);
  }
  std::set<std::string> notes;
  for (const auto& r : report.stacks.ranks)
    if (r.state == ProcessStacks::State::Captured && !r.note.empty()) notes.insert(r.note);
  for (const auto& note : notes) out += fmt::format("  note: {}\n", note);
  if (report.stacks.paths_left_out)
    out += fmt::format("  note: {} call paths past the first {} of a node were left out\n",
                       report.stacks.paths_left_out, kMaxStackClasses);
  out += ras_text(report.stacks.nccl_ras);
  out += flight_recorder_text(report);
  return out;
}

nlohmann::json stack_report_json(const StackReport& report) {
  const StackVerdict verdict = judge_stacks(report);
  auto places = [&](const std::vector<StackClass>& classes) {
    auto list = nlohmann::json::array();
    for (const auto& c : classes) {
      std::set<std::string> hosts;
      for (int r : c.ranks) hosts.insert(rank_host(report, r));
      list.push_back({{"ranks", c.ranks}, {"hosts", hosts}, {"threads", c.threads}, {"path", c.path}});
    }
    return list;
  };
  nlohmann::json out;
  out["when"] = report.when == StacksWhen::Timeout ? "timeout" : report.when == StacksWhen::Stall ? "stall" : "request";
  out["elsewhere"] = nlohmann::json::array();
  for (const auto& e : verdict.elsewhere)
    out["elsewhere"].push_back({{"rank", e.rank}, {"host", rank_host(report, e.rank)}, {"path", e.path}});
  if (verdict.majority) out["majority"] = {{"ranks", verdict.majority->ranks}, {"place", place_name(verdict.majority->path)}};
  out["all_in_one_place"] = verdict.all_in_one_place;
  out["gone"] = verdict.gone;
  out["unread"] = nlohmann::json::array();
  for (const auto& [rank, why] : verdict.unread) out["unread"].push_back({{"rank", rank}, {"why", why}});
  out["unanswered"] = report.unanswered;
  out["main_threads"] = places(report.stacks.main);
  out["threads"] = places(report.stacks.threads);
  out["ranks"] = nlohmann::json::array();
  for (const auto& r : report.stacks.ranks)
    out["ranks"].push_back(
        {{"rank", r.rank}, {"host", rank_host(report, r.rank)}, {"note", r.note}, {"held_ms", r.held_ms}});
  out["nccl_ras"] = nlohmann::json::array();
  for (const auto& a : report.stacks.nccl_ras)
    out["nccl_ras"].push_back({{"host", a.host}, {"address", a.address}, {"lines", a.lines}, {"error", a.error}});
  out["flight_recorder"] = nlohmann::json::array();
  for (const auto& d : report.stacks.flight_recorder)
    out["flight_recorder"].push_back(
        {{"rank", d.rank}, {"host", d.host}, {"source", d.source}, {"file", d.file}, {"note", d.note}});
  return out;
}

}  // namespace muster::cli
