// `muster smoke` as a step: a probe rank (`muster smoke-rank`) on every planned slot says
// hello, the collectives run over all of them (and, on request, within nodes, across nodes
// and between node pairs), and the head checks the hellos, every element and the speed.
// `doctor`'s smoke stage is the same step with a smaller sweep.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/job/finding.h"
#include "launcher/job/launch.h"
#include "probes/smoke.h"

namespace muster {

// A job's options as a probe rank wants them: bound to its NUMA node (the one of its GPU),
// not to one core. Gloo's device thread and NCCL's proxy thread run beside the rank's own,
// and pinned to one core they took turns with it: all-reduce and all-gather at 4 KiB-1 MiB
// had a floor of about 4 ms that torch's unbound ranks do not have (tests/bench/smoke_bench.sh).
JobOptions probe_rank_options();

class SmokeReport;

struct SmokeRequest {
  JobOptions launch = probe_rank_options();  // its command is set to the probe rank
  SmokeSettings settings;
  std::string backend = "auto";       // auto, nccl, gloo
  double collective_timeout_s = 60;   // one collective, or the rendezvous
  // Lines a probe rank printed that are not smoke lines (a library's warnings, a crash).
  std::function<void(int rank, std::string_view line)> on_other_line;
  // Each row of the sweep as soon as every rank is past its step, in the order run, as
  // nccl-tests prints them (the hellos and the backend are in by then); the rows still open
  // when the job ends follow at its end.
  std::function<void(const SmokeRow& row, const SmokeReport& so_far)> on_row;
  // The first rank entered a step: what runs now, for a progress line.
  std::function<void(const SmokeEvent& entered, const SmokeReport& so_far)> on_step;
};

struct SmokeOutcome {
  bool started = true;                 // false: a problem found from the plan stopped it first
  RankPlan plan;
  std::vector<SmokeRow> rows;
  std::string backend;                 // what the ranks agreed on; "?" if they never did
  std::vector<nlohmann::json> hellos;  // as the ranks sent them, by rank
  std::vector<Finding> problems;       // empty: every check passed
  std::optional<CulpritReport> pair_search;  // with settings.pairs: what it found
  std::vector<std::string> warnings;   // what the launch found that did not stop it
  std::optional<double> min_busbw_gbps;  // the bar its bus bandwidth was held to (checks.)
};

// What the probe ranks said, read line by line: the head's side of the smoke protocol. A
// line that is not a smoke line of this version goes to `on_other_line`: a rank's output can
// never make the head fail.
class SmokeReport : public JobOutput {
 public:
  using OtherLine = std::function<void(int rank, std::string_view line)>;
  using RowDone = std::function<void(const SmokeRow& row, const SmokeReport& so_far)>;
  using StepEntered = std::function<void(const SmokeEvent& entered, const SmokeReport& so_far)>;
  explicit SmokeReport(OtherLine on_other_line, RowDone on_row = {}, StepEntered on_step = {})
      : on_other_line_(std::move(on_other_line)), on_row_(std::move(on_row)), on_step_(std::move(on_step)) {}

  // The ranks to wait for before a row is done; rows are passed on from then.
  void expect(const RankPlan& plan);
  // The job ended: the rows not passed on yet go now, whoever never finished them.
  void finish();
  void line(int rank, OutputStream stream, std::string_view text) override;
  void flush() override {}
  void launch_warning(const std::string& text) override { warnings.push_back(text); }

  std::vector<std::string> warnings;
  std::map<int, std::vector<nlohmann::json>> hellos;  // by the rank that printed it
  std::map<int, std::vector<SmokeEvent>> results;
  std::map<int, int> last_enter;
  std::vector<std::pair<int, std::string>> failures;   // rank, message
  std::optional<SmokeEvent> first_error;               // the earliest step that failed
  std::set<int> steps_given_up;  // steps at which some rank gave up waiting for its peers
  std::optional<CulpritReport> culprits;  // what the pair search found, as rank 0 said it
  std::string backend = "?";
  RankPlan plan;                                       // as expect() gave it

 private:
  void record(int rank, const nlohmann::json& j);
  // Rank `rank` is done with every step up to `seq`: it has that step's result or error, or
  // entered a later one (a rank outside a step's group skips it).
  void done_upto(int rank, int seq);
  void pass_on_rows_up_to(int seq);
  OtherLine on_other_line_;
  RowDone on_row_;
  StepEntered on_step_;
  int entered_upto_ = 0;                // the latest step some rank entered
  std::map<int, int> done_upto_;        // by rank
  std::map<int, int> ranks_done_upto_;  // how many ranks are done up to each step; the first is the least
  std::map<int, SmokeRow> open_rows_;   // by step: the results in so far, while on_row_ is set
  int passed_upto_ = 0;                 // every step up to this one was passed on
};

// The checks on what the ranks said and how the job ended: hellos (every rank once, none
// duplicated), dead and missing ranks, wrong elements, the bus bandwidth threshold, and the
// slow nodes and links the pair search named.
std::vector<Finding> smoke_findings(const SmokeReport& report, const LaunchedJob& job,
                                    const std::vector<SmokeRow>& rows, const CheckThresholds& checks);

// Starts the probe ranks, runs the sweep and checks hellos, results and thresholds.
// Throws Error before anything starts when the input is wrong or a node is unreachable.
SmokeOutcome run_smoke(ClusterContext& context, const SmokeRequest& request);

// What the pair search could not tell (more than half the nodes below the others; a node or
// link seen slow once and not resolved): warnings, not failures.
std::vector<std::string> pair_search_unknowns(const CulpritReport& found, const RankPlan& plan);

// "rank 3 (node2)", or "rank 3 (?)" for a rank outside the plan.
std::string rank_and_host(const RankPlan& plan, int rank);

}  // namespace muster
