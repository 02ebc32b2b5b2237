// Which rank runs where: the central, deterministic assignment of ranks to nodes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/cluster/cluster_spec.h"

namespace muster {

// How consecutive ranks are placed (mpirun's --map-by).
enum class MapBy {
  Slot,  // fill node 0's slots, then node 1's, ... (the default)
  Node,  // one rank per node in turn, round-robin over nodes with free slots
};

// One rank's place in the job.
struct RankAssignment {
  int rank = 0;
  int local_rank = 0;
  int node_rank = 0;          // index of its node in the cluster
  std::string host;
  std::optional<int> gpu;     // local GPU index (CUDA PCI-bus order); unset: none or unknown
  // Its node's place among the nodes that run ranks, 0..nodes-1, as torchrun's GROUP_RANK:
  // a spare listed before the others, or a node that runs none, leaves no gap in it, and a
  // spare that takes over a node's ranks takes its place too.
  int group_rank = 0;
};

// One node's share of the job.
struct NodePlan {
  int node_rank = 0;
  std::string host;
  int slots = 0;              // slots the node offered
  std::vector<int> ranks;     // global ranks placed here, in local-rank order
};

// Every rank of a job, each exactly once.
struct RankPlan {
  std::vector<RankAssignment> ranks;  // indexed by rank
  std::vector<NodePlan> nodes;        // indexed by node rank; nodes without ranks included
  int world_size() const { return int(ranks.size()); }
};

// One node's share of a plan and the two facts of the whole job its ranks' environment
// needs: what the head sends that node's agent. It grows with the node's ranks, not with
// the cluster: the whole plan, sent to each of 4096 nodes, was 600 KB to every one of them.
struct NodeView {
  int node_rank = 0;
  int world_size = 0;
  int nodes_used = 0;                 // nodes with at least one rank
  std::vector<RankAssignment> ranks;  // the node's ranks, in local-rank order
};

// Slots a node offers: its fixed count, else its GPU count when known and non-zero, else 1.
int resolved_slots(const NodeSpec& node);

// Places `world_size` ranks (all slots when unset) on the cluster's nodes in file order; a
// spare holds none. Throws Error(Usage) when more ranks are asked for than there are slots.
RankPlan make_rank_plan(const ClusterSpec& cluster, std::optional<int> world_size, MapBy map_by);

// The plan with the k-th share of the job on `nodes[k]`: the k-th working (not spare) node of
// the cluster's share, so that a share moved to a spare keeps its slots, and so its rank
// numbers and group rank, and takes the spare's GPUs. A node that is not `usable` (not
// reached, or lost) runs none; the nodes not named run none either.
RankPlan plan_shares_on_nodes(const ClusterSpec& cluster, const std::vector<size_t>& nodes,
                              const std::vector<bool>& usable, std::optional<int> world_size, MapBy map_by);

// The plan as JSON ({"ranks": [...], "nodes": [...]}): what `muster plan --json` prints and
// what the head sends each agent. The reader throws nlohmann's errors on a malformed plan.
nlohmann::json rank_plan_json(const RankPlan& plan);
RankPlan rank_plan_from_json(const nlohmann::json& j);

// Node `node_rank`'s share of `plan` (which must have that node).
NodeView node_view(const RankPlan& plan, int node_rank);
nlohmann::json node_view_json(const NodeView& view);
// Throws nlohmann's errors on a malformed view, Error(Runtime) on one with more ranks than
// its world.
NodeView node_view_from_json(const nlohmann::json& j);
// Throws Error(Runtime) when `view` is not a node's share of one plan: a rank of another
// node, one beyond the world size, or local ranks out of order.
void check_node_view(const NodeView& view);

}  // namespace muster
