// Ranks' stacks merged as STAT merges them: every distinct call path once, with the ranks
// whose threads are on it. A node merges its own ranks before sending; the head merges the
// nodes'. The paths are grouped twice: by each rank's main thread (where the rank is, which
// the judge compares) and by every thread.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launcher/local/rank_libraries.h"
#include "launcher/local/rank_stacks.h"

namespace muster {

// At most this many distinct paths one node sends of each grouping; past it the rest are
// counted in `paths_left_out`.
inline constexpr size_t kMaxStackClasses = 1024;

// How long one node's reading of its ranks' stacks may take, all its ranks together: what the
// head asks of each agent, and what a job on this machine alone gives itself.
inline constexpr std::chrono::milliseconds kStacksReadLimit{3000};

// One call path (outermost frame first) and the ranks on it.
struct StackClass {
  std::vector<std::string> path;
  std::vector<int> ranks;  // sorted, each once
  int threads = 0;         // how many threads are on it
};

// What was read of one rank.
struct RankCapture {
  int rank = 0;
  ProcessStacks::State state = ProcessStacks::State::Captured;
  std::string note;
  double held_ms = 0;  // what reading it cost it: how long it was held still
};

// Ranks' stacks, merged.
struct MergedStacks {
  std::vector<RankCapture> ranks;   // sorted by rank
  std::vector<StackClass> main;     // by main thread: each captured rank on exactly one
  std::vector<StackClass> threads;  // by every thread
  size_t paths_left_out = 0;
  // What the ranks' libraries said, where they were asked (rank_libraries.h).
  std::vector<RasSummary> nccl_ras;                  // a node's: at most one
  std::vector<FlightRecorderDump> flight_recorder;  // by rank
};

// Why stacks were read: what the report says it was taken at.
enum class StacksWhen { Timeout, Stall, Request };

// What the head gathered: every node's stacks merged, and each rank's host.
struct StackReport {
  StacksWhen when = StacksWhen::Request;
  MergedStacks stacks;
  std::vector<std::string> host_of_rank;  // by rank
  std::vector<std::string> unanswered;    // hosts that did not answer in time
  std::vector<std::pair<int, std::string>> ended;  // ranks that ended before: how ("exit 0")
};

// Merges the stacks read of a node's ranks.
MergedStacks merge_rank_stacks(const std::vector<std::pair<int, ProcessStacks>>& stacks);

// Reads the stacks of `running` ranks (rank, pid: children of this process), each within
// its share of what is left of `limit` and never less than 20 ms, and merges them with
// `ended` ranks as Gone, with what the ranks' libraries answered meanwhile (NCCL's RAS
// service, torch's flight recorder). `around_each` runs each read (the agent holds reaping
// around it).
MergedStacks read_rank_stacks(const std::vector<std::pair<int, pid_t>>& running, const std::vector<int>& ended,
                              std::chrono::milliseconds limit,
                              const std::function<void(const std::function<void()>& read)>& around_each = {});

// Adds `more` (another node's) to `into`. `host` names that node in what its libraries said.
void merge_stacks(MergedStacks& into, MergedStacks more, const std::string& host);
// Adds `more` (another node's) to `into`.
void merge_stacks(MergedStacks& into, const MergedStacks& more);

std::string to_json(const MergedStacks& stacks);
// Throws Error(Runtime) when `text` is not merged stacks within the bounds above.
MergedStacks merged_stacks_from_json(std::string_view text);

// A report as the head sends it to `muster stacks`. The decoder throws Error(Runtime) on
// anything else.
std::string to_json(const StackReport& report);
StackReport stack_report_from_json(std::string_view text);

// The ranks in compact form: "0-3,5,7".
std::string rank_ranges(const std::vector<int>& ranks);

}  // namespace muster
