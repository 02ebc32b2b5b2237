#include "launcher/cluster/local_gpus.h"

#include "launcher/cluster/hostfile.h"

namespace muster {

std::optional<Topology> learn_local_gpus(ClusterSpec& cluster, TopologySource& source) {
  std::optional<Topology> topology;
  for (auto& node : cluster.nodes) {
    if (!is_this_machine(node.address)) continue;
    if (!topology) topology = source.load();
    node.gpu_count = int(topology->gpus.size());
  }
  return topology;
}

}  // namespace muster
