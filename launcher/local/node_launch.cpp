#include "launcher/local/node_launch.h"

#include <fmt/format.h>

#include "launcher/error.h"
#include "launcher/local/self.h"

namespace muster {

std::vector<RankProcess> rank_processes_for_node(const RankPlan& plan, int node_rank,
                                                 const LaunchRequest& request,
                                                 const Environment& base,
                                                 const Topology& topology) {
  if (request.bind != BindPolicy::None && !topology.is_this_machine)
    throw Error(ErrorKind::Usage,
                fmt::format("ranks can only be bound to this machine's CPUs, but the topology "
                            "came from {}; unset it or use --bind none",
                            topology.source));
  const auto& ranks = plan.nodes.at(size_t(node_rank)).ranks;
  std::vector<std::optional<int>> gpus;
  for (int rank : ranks) gpus.push_back(plan.ranks[size_t(rank)].gpu);
  std::vector<RankBinding> bindings = plan_bindings(topology, gpus, request.bind);
  std::vector<RankProcess> out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    RankProcess p;
    p.rank = ranks[i];
    p.spec.argv = request.argv;
    p.spec.env = rank_environment(base, plan, ranks[i], request.job);
    if (!p.spec.argv.empty() && p.spec.argv[0] == kMusterSelf) {
      // This muster again, started as it was started here (through its bundle's loader, or
      // /proc/self/exe), shown by ps as "muster smoke-rank".
      SelfCommand self = self_command();
      p.spec.program = self.program;
      self.argv.insert(self.argv.end(), p.spec.argv.begin() + 1, p.spec.argv.end());
      p.spec.argv = std::move(self.argv);
      for (const auto& [name, value] : self.env) p.spec.env.set(name, value);
    }
    p.spec.workdir = request.workdir;
    p.spec.cpus = bindings[i].cpus;
    p.binding = bindings[i];
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace muster
