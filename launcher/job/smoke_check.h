// `muster smoke` as a step: a probe rank (`muster smoke-rank`) on every planned slot says
// hello, the collectives run over all of them (and, on request, within nodes, across nodes
// and between node pairs), and the head checks the hellos, every element and the speed.
// `doctor`'s smoke stage is the same step with a smaller sweep.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/job/finding.h"
#include "launcher/job/launch.h"
#include "probes/smoke.h"

namespace muster {

struct SmokeRequest {
  JobOptions launch;                  // its command is set to the probe rank
  SmokeSettings settings;
  std::string backend = "auto";       // auto, nccl, gloo
  double collective_timeout_s = 60;   // one collective, or the rendezvous
  // Lines a probe rank printed that are not smoke lines (a library's warnings, a crash).
  std::function<void(int rank, std::string_view line)> on_other_line;
};

struct SmokeOutcome {
  RankPlan plan;
  std::vector<SmokeRow> rows;
  std::string backend;                 // what the ranks agreed on; "?" if they never did
  std::vector<nlohmann::json> hellos;  // as the ranks sent them, by rank
  std::vector<Finding> problems;       // empty: every check passed
  std::vector<std::string> warnings;   // what the launch found that did not stop it
};

// Starts the probe ranks, runs the sweep and checks hellos, results and thresholds.
// Throws Error before anything starts when the input is wrong or a node is unreachable.
SmokeOutcome run_smoke(ClusterContext& context, const SmokeRequest& request);

// "rank 3 (node2)", or "rank 3 (?)" for a rank outside the plan.
std::string rank_and_host(const RankPlan& plan, int rank);

}  // namespace muster
