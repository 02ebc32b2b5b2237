// What the cluster learns from this machine's topology before planning ranks.
#pragma once

#include <optional>

#include "launcher/cluster/cluster_spec.h"
#include "topology/topology_source.h"

namespace muster {

// Sets gpu_count of every node that is this machine from `source`, which is loaded only
// when such a node exists (discovery costs time a remote-only plan need not spend).
// Returns the loaded topology, if any.
std::optional<Topology> learn_local_gpus(ClusterSpec& cluster, TopologySource& source);

}  // namespace muster
