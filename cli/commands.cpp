#include "cli/commands.h"

namespace muster::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> head = {
      {"doctor", "every check in order (cluster, SSH, topology, health, network, launch, smoke) for CI",
       setup_doctor},
      {"health", "this node's hardware health (PCIe, InfiniBand, GPUs, Xids) for Slurm and cron",
       setup_health},
      {"run", "start a job's ranks with their environment, output and teardown", setup_run},
      {"stacks", "where a running job's ranks are: every rank's stacks, the odd one named", setup_stacks},
      {"smoke", "a hello from every rank, then all-reduce and friends over NCCL or Gloo",
       setup_smoke},
      {"topo", "GPUs, NICs and the paths between them, like nvidia-smi topo -m", setup_topo},
      {"plan", "show which rank runs where, like mpirun --display-map", setup_plan},
      {"ping", "reachability, RTT and bandwidth between every pair of nodes; picks interfaces",
       setup_ping},
      {"exec", "run a command once on every node, like pdsh", setup_exec},
      {"hostlist", "expand, fold or count host lists, like ClusterShell's nodeset",
       setup_hostlist},
      {"bundle", "write the self-contained bundle muster ships to nodes, to pre-install it",
       setup_bundle},
  };
  static const std::vector<Command> all = [] {
    std::vector<Command> out = head;
    for (const auto& c : node_commands()) out.push_back(c);
    return out;
  }();
  return all;
}

}  // namespace muster::cli
