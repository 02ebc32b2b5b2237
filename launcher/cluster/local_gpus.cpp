#include "launcher/cluster/local_gpus.h"

#include "launcher/cluster/hostfile.h"

namespace muster {

std::optional<LocalMachine> learn_local_gpus(ClusterSpec& cluster, TopologySource& source) {
  std::optional<LocalMachine> machine;
  for (auto& node : cluster.nodes) {
    if (!is_this_machine(node.address)) continue;
    if (!machine) {
      const Topology all = source.load();
      const JobGpus job = job_gpus(all.gpus, Environment::current());
      machine = LocalMachine{restrict_to_job(all, job), job, all.gpus.size()};
    }
    node.gpu_count = int(machine->topology.gpus.size());
  }
  return machine;
}

}  // namespace muster
