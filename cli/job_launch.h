// Starting a job's ranks, here or across nodes: what `run`, `smoke` and `doctor` share.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli/cluster_input.h"
#include "cli/remote_options.h"
#include "launcher/local/local_job.h"
#include "launcher/cluster/rank_plan.h"
#include "topology/binding.h"

namespace muster::cli {

// Everything about how a job is started, as the flags give it.
struct JobLaunchOptions {
  ClusterInputOptions cluster;
  RemoteFlags remote;
  std::vector<std::string> command;   // argv[0] may be kMusterSelf
  std::vector<std::string> exports;   // -x
  BindPolicy bind = BindPolicy::Core;
  bool report_bindings = false;
  double grace_s = 3;
  double timeout_s = 0;               // 0: none
};

struct LaunchedJob {
  RankPlan plan;
  JobResult result;
  CheckThresholds checks;  // the cluster's checks:, read with the cluster
};

using OutputFactory = std::function<std::unique_ptr<JobOutput>(const RankPlan&)>;

// Plans and starts the ranks (locally when every node is this machine, else through an
// agent per node) and supervises them until all ended. Throws Error before anything starts
// when the input is wrong or a node cannot be reached.
LaunchedJob launch_job(const JobLaunchOptions& options, const OutputFactory& make_output);

// Prints how a job ended that did not end well: the failed rank, signals, stragglers.
void report_job_end(const JobResult& result, const RankPlan& plan, double timeout_s);

}  // namespace muster::cli
