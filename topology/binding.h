// Which CPUs each local rank is bound to: the cores local to its GPU, split evenly among
// the ranks that share them, or an even spread over NUMA nodes when there are no GPUs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "topology/topology.h"

namespace muster {

// How ranks are bound (--bind).
enum class BindPolicy {
  None,  // no binding
  Numa,  // every CPU of the rank's NUMA node (its GPU's, or its share of the spread)
  Core,  // the rank's own share of those cores (the default)
};

// "none", "numa" or "core"; anything else is Core, the default.
BindPolicy bind_policy_from_name(const std::string& name);
const char* bind_policy_name(BindPolicy policy);

struct RankBinding {
  std::vector<int> cpus;    // PU os indexes; empty when not bound
  std::optional<int> numa;  // the NUMA node the rank belongs to, when known
  std::optional<int> gpu;   // the rank's GPU index
};

// Bindings for a node's local ranks; `gpu_of_local_rank[i]` is local rank i's GPU, if any.
std::vector<RankBinding> plan_bindings(const Topology& topology,
                                       const std::vector<std::optional<int>>& gpu_of_local_rank,
                                       BindPolicy policy);

}  // namespace muster
