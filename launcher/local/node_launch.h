// Turning a rank plan into the processes one node starts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/local/local_job.h"
#include "launcher/cluster/rank_env.h"
#include "launcher/cluster/rank_plan.h"
#include "topology/binding.h"
#include "topology/topology.h"

namespace muster {

// As argv[0]: the muster binary itself on the node that starts the rank (for probe ranks
// such as smoke's), whatever path it has there.
inline constexpr const char* kMusterSelf = "muster:self";

// What every rank of a job runs, and where.
struct LaunchRequest {
  std::vector<std::string> argv;      // the command, passed verbatim
  std::optional<std::string> workdir;
  JobEnvironment job;
  BindPolicy bind = BindPolicy::Core;
};

// The processes node `node_rank` starts for `plan`: each rank's command, environment
// (`base` is the node's own environment, inherited as a local shell would) and CPU binding
// from the node's `topology`. Throws Error(Usage) when binding is asked for against a
// topology that is not this machine's.
std::vector<RankProcess> rank_processes_for_node(const RankPlan& plan, int node_rank,
                                                 const LaunchRequest& request,
                                                 const Environment& base,
                                                 const Topology& topology);

}  // namespace muster
