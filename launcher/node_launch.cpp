#include "launcher/node_launch.h"

namespace muster {

std::vector<RankProcess> rank_processes_for_node(const RankPlan& plan, int node_rank,
                                                 const LaunchRequest& request,
                                                 const Environment& base) {
  std::vector<RankProcess> out;
  for (int rank : plan.nodes.at(size_t(node_rank)).ranks) {
    RankProcess p;
    p.rank = rank;
    p.spec.argv = request.argv;
    p.spec.env = rank_environment(base, plan, rank, request.job);
    p.spec.workdir = request.workdir;
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace muster
