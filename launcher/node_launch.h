// Turning a rank plan into the processes one node starts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/local_job.h"
#include "launcher/rank_env.h"
#include "launcher/rank_plan.h"

namespace muster {

// What every rank of a job runs, and where.
struct LaunchRequest {
  std::vector<std::string> argv;      // the command, passed verbatim
  std::optional<std::string> workdir;
  JobEnvironment job;
};

// The processes node `node_rank` starts for `plan`: each rank's command and environment
// (`base` is the node's own environment, inherited as a local shell would).
std::vector<RankProcess> rank_processes_for_node(const RankPlan& plan, int node_rank,
                                                 const LaunchRequest& request,
                                                 const Environment& base);

}  // namespace muster
