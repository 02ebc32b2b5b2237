#include "launcher/cluster/cluster_input.h"

#include "launcher/cluster/cluster_file.h"
#include "launcher/cluster/hostfile.h"

namespace muster {

ClusterSpec load_cluster(const ClusterInput& input) {
  if (!input.cluster_file.empty()) return load_cluster_file(input.cluster_file);
  if (!input.hostfile.empty()) return load_hostfile(input.hostfile);
  if (!input.hosts.empty()) return parse_host_option(input.hosts);
  ClusterSpec spec = this_machine_cluster();
  // `-n N` alone means N ranks here, as with torchrun --nproc-per-node.
  if (input.ranks) spec.nodes.front().slots.fixed = *input.ranks;
  return spec;
}

}  // namespace muster
