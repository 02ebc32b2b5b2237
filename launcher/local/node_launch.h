// Turning a rank plan into the processes one node starts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/local/local_job.h"
#include "launcher/local/mpi_world.h"
#include "launcher/cluster/rank_env.h"
#include "launcher/cluster/rank_plan.h"
#include "topology/binding.h"
#include "topology/topology.h"

namespace muster {

// As argv[0]: the muster binary itself on the node that starts the rank (for probe ranks
// such as smoke's), whatever path it has there.
inline constexpr const char* kMusterSelf = "muster:self";

// In a probe rank's environment (argv[0] kMusterSelf, never a user's rank): the GPU of its
// local rank as the node's agent discovered it, as JSON ({"index", "pci_bus_id", "vendor_id",
// "model", "uuid"}, or null for none). hwloc's discovery reads every PCI device's config
// space, which costs a rank as much as it cost the agent (14 ms of CPU on the test VM, far
// more on a node with hundreds of devices); a node's eight probe ranks need not repeat it.
inline constexpr const char* kRankGpuVariable = "MUSTER_RANK_GPU";
std::string rank_gpu_json(const Topology& topology, int local_rank);
// That JSON for one GPU; the probe rank's hello carries it too.
nlohmann::json gpu_json(const Gpu& gpu);
// The GPU `rank_gpu_json` wrote (nullopt for null). Throws Error(Usage) naming the variable
// when the text is not such JSON.
std::optional<Gpu> rank_gpu_from_json(const std::string& text);

// What a node does when it cannot enter a job's working directory.
enum class WorkdirRule {
  Required,  // the ranks fail to start, as mpirun --wdir and srun --chdir asked for
  OrHome,    // they start in $HOME, as mpirun's remote ranks do when the caller's is missing
};

// What every rank of a job runs, and where.
struct LaunchRequest {
  std::vector<std::string> argv;      // the command, passed verbatim
  std::optional<std::string> workdir;  // unset: wherever the node's starter stands
  WorkdirRule workdir_rule = WorkdirRule::Required;
  JobEnvironment job;
  BindPolicy bind = BindPolicy::Core;
  std::optional<MpiWorld> mpi;  // unset: nothing served (muster's own probe ranks)
};

// Where a node starts its ranks: `request.workdir` when it is a directory this process can
// enter; under WorkdirRule::OrHome, `base`'s HOME (or "/") instead, with `went_home` set so
// the head can say which nodes did. Under Required the workdir is kept as it is, and the
// spawn says why it cannot be entered.
struct NodeWorkdir {
  std::optional<std::string> path;
  bool went_home = false;
};
NodeWorkdir node_workdir(const LaunchRequest& request, const Environment& base);

// The processes a node starts for its share of a plan: each rank's command, environment
// (`base` is the node's own environment, inherited as a local shell would) and CPU binding
// from the node's `topology`. Throws Error(Usage) when binding is asked for against a
// topology that is not this machine's, Error(Runtime) when `node` is no node's share of a plan.
std::vector<RankProcess> rank_processes_for_node(const NodeView& node,
                                                 const LaunchRequest& request,
                                                 const Environment& base,
                                                 const Topology& topology);

}  // namespace muster
