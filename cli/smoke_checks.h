// muster smoke's checks as data, for `smoke` to print and `doctor` to fold into its report.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/job_launch.h"
#include "probes/smoke.h"

namespace muster::cli {

struct SmokeOptions {
  JobLaunchOptions launch;
  SmokeSettings settings;
  std::string backend = "auto";
  std::string split;
  double collective_timeout_s = 60;
  bool json = false;
};

struct SmokeProblem {
  std::string check, message;
};

struct SmokeOutcome {
  RankPlan plan;
  std::vector<SmokeRow> rows;
  std::string backend;
  int hellos = 0;
  std::vector<SmokeProblem> problems;  // empty: every check passed
  nlohmann::json json;                 // the --json report
  std::string text;                    // the human tables
};

// Starts the probe ranks, runs the sweep and checks hellos, results and thresholds.
// Throws Error before anything starts when the input is wrong or a node is unreachable.
SmokeOutcome run_smoke_checks(SmokeOptions& options);

}  // namespace muster::cli
