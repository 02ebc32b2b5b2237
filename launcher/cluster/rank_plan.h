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

// Slots a node offers: its fixed count, else its GPU count when known and non-zero, else 1.
int resolved_slots(const NodeSpec& node);

// Places `world_size` ranks (all slots when unset) on the cluster's nodes in file order.
// Throws Error(Usage) when more ranks are asked for than there are slots.
RankPlan make_rank_plan(const ClusterSpec& cluster, std::optional<int> world_size, MapBy map_by);

// The plan as JSON ({"ranks": [...], "nodes": [...]}): what `muster plan --json` prints and
// what the head sends each agent. The reader throws nlohmann's errors on a malformed plan.
nlohmann::json rank_plan_json(const RankPlan& plan);
RankPlan rank_plan_from_json(const nlohmann::json& j);

}  // namespace muster
