// The health stage of doctor and `muster health`: every node's local checks (PCIe links,
// InfiniBand ports, GPUs through NVML, Xids in the kernel log, software), run by each node's
// agent at once over the session, or here when the cluster is this machine; then what only
// the head can see, the node whose software or hardware differs from the rest.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/job/cluster_context.h"
#include "topology/health/health.h"
#include "topology/health/node_record.h"

namespace muster {

// One node's checks as its agent (or this machine) answered them.
struct NodeHealthResult {
  size_t node = 0;                     // node rank
  std::optional<NodeHealth> health;    // unset: no answer
  std::string why_not;                 // why not, then
  bool hung = false;                   // no answer from a node still reached: a check hung there
};

struct ClusterHealth {
  std::vector<NodeHealthResult> nodes;  // the nodes asked, in node order
};

// How long a node's checks may take before the one that hangs is named: far above the tens
// of milliseconds they take, below the head's wait for an agent's answer.
inline constexpr std::chrono::milliseconds kHealthDeadline{15000};

// Whether the GPU libraries are asked: they are this machine's, so not for a snapshot of
// another (--fsroot).
enum class GpuLibrariesAsked { Yes, NotForASnapshot };

// This machine's checks, reading under `root`, cut at `deadline`; counters that only grow are
// judged against the baseline in health_state_dir() (a snapshot's by its own boot id).
NodeHealth check_this_node(const std::string& root, const HealthExpectations& expect,
                           std::chrono::milliseconds deadline = kHealthDeadline,
                           GpuLibrariesAsked gpus = GpuLibrariesAsked::Yes);

// Records this machine's healthy facts (read under `root`) as its expectations in
// health_state_dir(), as NHC's nhc-genconf does; later check_this_node runs check against
// them where the cluster file expects nothing. Checks that hang past `deadline` record
// nothing, and say so.
RecordedNode record_this_node(const std::string& root, GpuLibrariesAsked gpus = GpuLibrariesAsked::Yes,
                              std::chrono::milliseconds deadline = kHealthDeadline);

// accept_counter_baseline for this machine (read under `root`) into health_state_dir(), cut
// at `deadline` as the checks are: a read of the node's files that hangs accepts nothing.
AcceptedCounters accept_this_nodes_counters(const std::string& root,
                                            std::chrono::milliseconds deadline = kHealthDeadline);

// Every usable node's checks at once (or those of `nodes`, where a node the session cannot
// use answers with why), each answer awaited at most `limit` (a check that hangs, as NVML
// does on a wedged GPU, then costs that and no more; above kHealthDeadline the hung check
// names itself). The differences across the nodes asked are added to each node's findings.
// `stress`: the GPU stress tests run whatever the cluster file's checks.stress says.
ClusterHealth check_cluster_health(ClusterContext& context, std::chrono::milliseconds limit, bool stress = false,
                                   const std::optional<std::vector<size_t>>& nodes = std::nullopt);

// The same nodes' error counters read again: what grew since `start`, by node rank.
std::vector<std::pair<size_t, HealthFinding>> counters_grown_since(ClusterContext& context,
                                                                   const ClusterHealth& start,
                                                                   std::chrono::milliseconds limit);

// For each node, findings for the facts in which it differs from its peers: software (a
// driver, CUDA, NCCL or kernel of its own) from a strict majority of all nodes, a warning;
// hardware only within its model (DMI make and model, else GPU model): fewer GPUs, NVLinks or
// IB ports than the most a node of its model has fails when a strict majority has that many
// and warns when none has, another GPU model or IB rate than a strict majority fails.
std::vector<std::vector<HealthFinding>> differences_across_nodes(const std::vector<NodeSoftware>& nodes);

// For each node, the GPU stress figures that passed on the node yet fall below `peer_ratio`
// of the median of the same figure on GPUs of its model across the cluster (pairs with as
// many NVLinks), with at least three nodes measured: a node whose GPUs are slow alike.
std::vector<std::vector<HealthFinding>> stress_across_nodes(const std::vector<const NodeHealth*>& nodes,
                                                            double peer_ratio);

}  // namespace muster
