// What the cluster learns from this machine's topology before planning ranks.
#pragma once

#include <optional>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/cluster/job_gpus.h"
#include "topology/topology_source.h"

namespace muster {

struct LocalMachine {
  Topology topology;    // with only the job's GPUs, numbered as the job's CUDA numbers them
  JobGpus job;          // which of the machine's GPUs those are, and why
  size_t all_gpus = 0;  // the machine's GPUs, the job's or not
};

// Sets gpu_count of every node that is this machine from `source`, which is loaded only
// when such a node exists (discovery costs time a remote-only plan need not spend): the GPUs
// this job may use (see job_gpus.h). Returns this machine as loaded, if it was.
std::optional<LocalMachine> learn_local_gpus(ClusterSpec& cluster, TopologySource& source);

}  // namespace muster
