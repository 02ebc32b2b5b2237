#include "launcher/local/stack_tree.h"

#include <unistd.h>

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/error.h"
#include "launcher/json_fields.h"
#include "launcher/text_bytes.h"

namespace muster {
namespace {

using Classes = std::map<std::vector<std::string>, StackClass>;

void add(Classes& classes, size_t& left_out, const std::vector<std::string>& path, const std::vector<int>& ranks,
         int threads) {
  auto it = classes.find(path);
  if (it == classes.end()) {
    if (classes.size() >= kMaxStackClasses) {
      ++left_out;
      return;
    }
    it = classes.emplace(path, StackClass{path, {}, 0}).first;
  }
  auto& into = it->second.ranks;
  into.insert(into.end(), ranks.begin(), ranks.end());
  std::sort(into.begin(), into.end());
  into.erase(std::unique(into.begin(), into.end()), into.end());
  it->second.threads += threads;
}

std::vector<StackClass> largest_first(Classes classes) {
  std::vector<StackClass> out;
  for (auto& [path, c] : classes) out.push_back(std::move(c));
  std::stable_sort(out.begin(), out.end(), [](const StackClass& a, const StackClass& b) {
    return a.ranks.size() != b.ranks.size() ? a.ranks.size() > b.ranks.size() : a.ranks < b.ranks;
  });
  return out;
}

Classes keyed(const std::vector<StackClass>& classes) {
  Classes out;
  for (const auto& c : classes) out.emplace(c.path, c);
  return out;
}

const char* state_name(ProcessStacks::State s) {
  switch (s) {
    case ProcessStacks::State::Captured: return "captured";
    case ProcessStacks::State::Gone: return "gone";
    case ProcessStacks::State::Failed: return "failed";
  }
  return "failed";
}

ProcessStacks::State state_from(const std::string& name) {
  if (name == "captured") return ProcessStacks::State::Captured;
  if (name == "gone") return ProcessStacks::State::Gone;
  if (name == "failed") return ProcessStacks::State::Failed;
  throw Error(ErrorKind::Runtime, fmt::format("unknown rank state '{}'", name));
}

nlohmann::json classes_json(const std::vector<StackClass>& classes) {
  auto out = nlohmann::json::array();
  for (const auto& c : classes) out.push_back({{"path", c.path}, {"ranks", c.ranks}, {"threads", c.threads}});
  return out;
}

std::vector<StackClass> classes_from(const nlohmann::json& list) {
  if (!list.is_array() || list.size() > kMaxStackClasses * 8)
    throw Error(ErrorKind::Runtime, "too many call paths");
  std::vector<StackClass> out;
  for (const auto& c : list) {
    StackClass sc;
    const auto& path = c.at("path");
    const auto& ranks = c.at("ranks");
    if (!path.is_array() || path.size() > kMaxStackFrames + kMaxPythonFrames)
      throw Error(ErrorKind::Runtime, "a call path too long");
    if (!ranks.is_array() || ranks.size() > (size_t(1) << 20)) throw Error(ErrorKind::Runtime, "too many ranks");
    for (const auto& f : path) {
      std::string frame = f.get<std::string>();
      // The agent cut each frame where it made it: a longer one is not muster's.
      if (frame.size() > kMaxFrameText) throw Error(ErrorKind::Runtime, "a frame too long");
      sc.path.push_back(std::move(frame));
    }
    for (const auto& r : ranks) sc.ranks.push_back(r.get<int>());
    std::sort(sc.ranks.begin(), sc.ranks.end());
    sc.ranks.erase(std::unique(sc.ranks.begin(), sc.ranks.end()), sc.ranks.end());
    sc.threads = c.value("threads", 0);
    out.push_back(std::move(sc));
  }
  return out;
}

}  // namespace

MergedStacks read_rank_stacks(const std::vector<std::pair<int, pid_t>>& running, const std::vector<int>& ended,
                              std::chrono::milliseconds limit,
                              const std::function<void(const std::function<void()>& read)>& around_each) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + limit;
  RankLibraries libraries(running, limit);
  std::vector<std::pair<int, ProcessStacks>> read;
  for (int rank : ended) read.emplace_back(rank, ProcessStacks{ProcessStacks::State::Gone, "the rank has ended", {}});
  size_t left = running.size();
  for (const auto& [rank, pid] : running) {
    // Each rank its share of what is left, and never less than a few milliseconds.
    const auto share = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()) /
                                    int(left),
                                std::chrono::milliseconds(20));
    const auto read_one = [&, rank = rank, pid = pid] {
      read.emplace_back(rank, capture_process_stacks(pid, share, getpid()));
    };
    if (around_each) around_each(read_one);
    else read_one();
    --left;
  }
  MergedStacks out = merge_rank_stacks(read);
  if (auto ras = libraries.ras()) out.nccl_ras.push_back(std::move(*ras));
  out.flight_recorder = libraries.flight_recorder_dumps();
  return out;
}

MergedStacks merge_rank_stacks(const std::vector<std::pair<int, ProcessStacks>>& stacks) {
  MergedStacks out;
  Classes main, threads;
  for (const auto& [rank, process] : stacks) {
    out.ranks.push_back({rank, process.state, process.note, process.held_ms});
    if (process.state != ProcessStacks::State::Captured || process.threads.empty()) continue;
    add(main, out.paths_left_out, process.threads.front().frames, {rank}, 1);
    for (const auto& thread : process.threads) add(threads, out.paths_left_out, thread.frames, {rank}, 1);
  }
  std::sort(out.ranks.begin(), out.ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  out.main = largest_first(std::move(main));
  out.threads = largest_first(std::move(threads));
  return out;
}

void merge_stacks(MergedStacks& into, const MergedStacks& more) {
  into.ranks.insert(into.ranks.end(), more.ranks.begin(), more.ranks.end());
  std::sort(into.ranks.begin(), into.ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  Classes main = keyed(into.main), threads = keyed(into.threads);
  for (const auto& c : more.main) add(main, into.paths_left_out, c.path, c.ranks, c.threads);
  for (const auto& c : more.threads) add(threads, into.paths_left_out, c.path, c.ranks, c.threads);
  into.paths_left_out += more.paths_left_out;
  into.main = largest_first(std::move(main));
  into.threads = largest_first(std::move(threads));
  into.nccl_ras.insert(into.nccl_ras.end(), more.nccl_ras.begin(), more.nccl_ras.end());
  into.flight_recorder.insert(into.flight_recorder.end(), more.flight_recorder.begin(), more.flight_recorder.end());
  std::sort(into.flight_recorder.begin(), into.flight_recorder.end(),
            [](const auto& a, const auto& b) { return a.rank < b.rank; });
}

void merge_stacks(MergedStacks& into, MergedStacks more, const std::string& host) {
  for (auto& ras : more.nccl_ras) ras.host = host;
  for (auto& dump : more.flight_recorder) dump.host = host;
  merge_stacks(into, more);
}

namespace {

nlohmann::json merged_json(const MergedStacks& stacks) {
  nlohmann::json out;
  out["ranks"] = nlohmann::json::array();
  for (const auto& r : stacks.ranks)
    out["ranks"].push_back({{"rank", r.rank}, {"state", state_name(r.state)}, {"note", r.note}, {"held_ms", r.held_ms}});
  out["main"] = classes_json(stacks.main);
  out["threads"] = classes_json(stacks.threads);
  out["paths_left_out"] = stacks.paths_left_out;
  out["nccl_ras"] = nlohmann::json::array();
  for (const auto& ras : stacks.nccl_ras)
    out["nccl_ras"].push_back({{"host", ras.host}, {"address", ras.address}, {"lines", ras.lines}, {"error", ras.error}});
  out["flight_recorder"] = nlohmann::json::array();
  for (const auto& d : stacks.flight_recorder)
    out["flight_recorder"].push_back({{"rank", d.rank},
                                      {"host", d.host},
                                      {"source", d.source},
                                      {"bytes64", base64_encode(d.bytes)},
                                      {"file", d.file},
                                      {"note", d.note}});
  return out;
}

// A string of a peer's cut to `limit` bytes between characters.
std::string bounded(const nlohmann::json& value, size_t limit) {
  std::string text = value.get<std::string>();
  if (text.size() > limit) text.resize(character_boundary(text, limit, false));
  return text;
}

void libraries_from(const nlohmann::json& in, MergedStacks& out) {
  constexpr size_t kMostEntries = size_t(1) << 20;
  constexpr size_t kMostText = 4 * kMaxFrameText;
  const auto ras = in.value("nccl_ras", nlohmann::json::array());
  const auto dumps = in.value("flight_recorder", nlohmann::json::array());
  if (!ras.is_array() || !dumps.is_array() || ras.size() > kMostEntries || dumps.size() > kMostEntries)
    throw Error(ErrorKind::Runtime, "too many libraries' answers");
  for (const auto& r : ras) {
    RasSummary summary{bounded(r.at("host"), kMostText), bounded(r.at("address"), kMostText), {},
                       bounded(r.at("error"), kMostText)};
    const auto& lines = r.at("lines");
    if (!lines.is_array() || lines.size() > kMaxRasLines) throw Error(ErrorKind::Runtime, "a RAS answer too long");
    for (const auto& line : lines) summary.lines.push_back(bounded(line, kMaxRasLineBytes));
    out.nccl_ras.push_back(std::move(summary));
  }
  for (const auto& d : dumps) {
    const auto& text = d.at("bytes64").get_ref<const std::string&>();
    if (text.size() > (kMaxFlightRecorderDump + 2) / 3 * 4) throw Error(ErrorKind::Runtime, "a dump too large");
    auto bytes = base64_decode(text);
    if (!bytes) throw Error(ErrorKind::Runtime, "a dump that is not base64");
    out.flight_recorder.push_back({d.at("rank").get<int>(), bounded(d.at("host"), kMostText),
                                   bounded(d.at("source"), kMostText), std::move(*bytes),
                                   bounded(d.at("file"), kMostText), bounded(d.at("note"), kMostText)});
  }
}

MergedStacks merged_from(const nlohmann::json& in) {
  MergedStacks out;
  const auto& ranks = in.at("ranks");
  if (!ranks.is_array() || ranks.size() > (size_t(1) << 20)) throw Error(ErrorKind::Runtime, "too many ranks");
  for (const auto& r : ranks) {
    std::string note = r.value("note", "");
    if (note.size() > 4 * kMaxFrameText) note.resize(character_boundary(note, 4 * kMaxFrameText, false));
    const double held_ms = std::clamp(r.value("held_ms", 0.0), 0.0, 3.6e6);
    out.ranks.push_back({r.at("rank").get<int>(), state_from(r.at("state").get<std::string>()), std::move(note), held_ms});
  }
  out.main = classes_from(in.at("main"));
  out.threads = classes_from(in.at("threads"));
  out.paths_left_out = in.value("paths_left_out", size_t(0));
  libraries_from(in, out);
  return out;
}

}  // namespace

std::string to_json(const MergedStacks& stacks) { return json_text(merged_json(stacks)); }

MergedStacks merged_stacks_from_json(std::string_view text) {
  try {
    return merged_from(parse_untrusted_json(text));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::Runtime, fmt::format("stacks that are not muster's: {}", e.what()));
  }
}

std::string to_json(const StackReport& report) {
  nlohmann::json out;
  out["when"] = int(report.when);
  out["stacks"] = merged_json(report.stacks);
  out["host_of_rank"] = report.host_of_rank;
  out["unanswered"] = report.unanswered;
  out["ended"] = nlohmann::json::array();
  for (const auto& [rank, how] : report.ended) out["ended"].push_back({{"rank", rank}, {"how", how}});
  return json_text(out);
}

StackReport stack_report_from_json(std::string_view text) {
  try {
    const auto in = parse_untrusted_json(text);
    StackReport report;
    const int when = in.at("when").get<int>();
    if (when < 0 || when > int(StacksWhen::Request)) throw Error(ErrorKind::Runtime, "an unknown reason");
    report.when = StacksWhen(when);
    report.stacks = merged_from(in.at("stacks"));
    report.host_of_rank = in.at("host_of_rank").get<std::vector<std::string>>();
    report.unanswered = in.at("unanswered").get<std::vector<std::string>>();
    for (const auto& e : in.at("ended")) report.ended.emplace_back(e.at("rank").get<int>(), e.at("how").get<std::string>());
    return report;
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::Runtime, fmt::format("a stacks report that is not muster's: {}", e.what()));
  }
}

std::string rank_ranges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace muster
