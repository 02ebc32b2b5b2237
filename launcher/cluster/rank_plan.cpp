#include "launcher/cluster/rank_plan.h"

#include <fmt/format.h>

#include "launcher/error.h"

namespace muster {

int resolved_slots(const NodeSpec& node) {
  if (node.slots.fixed) return *node.slots.fixed;
  if (node.gpu_count && *node.gpu_count > 0) return *node.gpu_count;
  return 1;
}

RankPlan make_rank_plan(const ClusterSpec& cluster, std::optional<int> world_size,
                        MapBy map_by) {
  RankPlan plan;
  long long total_slots = 0;  // up to kMaxHostListSize nodes of kMaxSlotsPerNode: no overflow
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    const NodeSpec& node = cluster.nodes[i];
    // A spare is held back for the job's restarts: it runs a share only when given one.
    plan.nodes.push_back(NodePlan{int(i), node.host, node.spare ? 0 : resolved_slots(node), {}});
    total_slots += plan.nodes.back().slots;
  }
  if (!world_size && total_slots > kMaxRanks)
    throw Error(ErrorKind::Usage,
                fmt::format("{} offers {} slots, more than muster's limit of {} ranks in one job; "
                            "give -n, or fewer slots", cluster.source.empty() ? "the cluster" : cluster.source,
                            total_slots, kMaxRanks));
  const long long wanted = world_size.value_or(int(total_slots));
  if (wanted < 1) throw Error(ErrorKind::Usage, fmt::format("-n {}: a job needs at least one rank", wanted));
  if (wanted > kMaxRanks)
    throw Error(ErrorKind::Usage, fmt::format("-n {}: more than muster's limit of {} ranks", wanted, kMaxRanks));
  if (wanted > total_slots)
    throw Error(ErrorKind::Usage,
                fmt::format("-n {} asks for more ranks than the {} slots of {}; lower -n or "
                            "give nodes more slots", wanted, total_slots,
                            cluster.source.empty() ? "the cluster" : cluster.source));

  auto place = [&](NodePlan& node) {
    const NodeSpec& spec = cluster.nodes[size_t(node.node_rank)];
    RankAssignment r;
    r.rank = int(plan.ranks.size());
    r.local_rank = int(node.ranks.size());
    r.node_rank = node.node_rank;
    r.host = node.host;
    // CUDA numbers GPUs 0..n-1 in PCI bus order; local rank i takes GPU i when it exists.
    if (spec.gpu_count && r.local_rank < *spec.gpu_count) r.gpu = r.local_rank;
    node.ranks.push_back(r.rank);
    plan.ranks.push_back(std::move(r));
  };

  if (map_by == MapBy::Slot) {
    for (auto& node : plan.nodes)
      while (int(node.ranks.size()) < node.slots && plan.world_size() < wanted) place(node);
  } else {
    while (plan.world_size() < wanted)
      for (auto& node : plan.nodes)
        if (int(node.ranks.size()) < node.slots && plan.world_size() < wanted) place(node);
  }
  int group = 0;
  for (const auto& node : plan.nodes) {
    for (int rank : node.ranks) plan.ranks[size_t(rank)].group_rank = group;
    group += !node.ranks.empty();
  }
  return plan;
}

RankPlan plan_shares_on_nodes(const ClusterSpec& cluster, const std::vector<size_t>& nodes,
                              const std::vector<bool>& usable, std::optional<int> world_size, MapBy map_by) {
  std::vector<size_t> working;
  for (size_t i = 0; i < cluster.nodes.size(); ++i)
    if (!cluster.nodes[i].spare) working.push_back(i);
  ClusterSpec shares;
  shares.source = cluster.source;
  for (size_t k = 0; k < nodes.size() && k < working.size(); ++k) {
    NodeSpec share = cluster.nodes[nodes[k]];
    share.spare = false;
    share.slots.fixed = usable[nodes[k]] ? resolved_slots(cluster.nodes[working[k]]) : 0;
    shares.nodes.push_back(std::move(share));
  }
  RankPlan by_share = make_rank_plan(shares, world_size, map_by);
  RankPlan plan;
  for (size_t i = 0; i < cluster.nodes.size(); ++i) plan.nodes.push_back(NodePlan{int(i), cluster.nodes[i].host, 0, {}});
  for (size_t k = 0; k < by_share.nodes.size(); ++k) {
    NodePlan& node = plan.nodes[nodes[k]];
    node = std::move(by_share.nodes[k]);
    node.node_rank = int(nodes[k]);
  }
  plan.ranks = std::move(by_share.ranks);
  for (auto& r : plan.ranks) r.node_rank = int(nodes[size_t(r.node_rank)]);
  return plan;
}

namespace {

nlohmann::json rank_json(const RankAssignment& r) {
  return {{"rank", r.rank}, {"local_rank", r.local_rank}, {"node_rank", r.node_rank},
          {"group_rank", r.group_rank}, {"host", r.host}, {"gpu", r.gpu ? nlohmann::json(*r.gpu) : nlohmann::json(nullptr)}};
}

RankAssignment rank_from_json(const nlohmann::json& r) {
  RankAssignment a;
  a.rank = r.at("rank");
  a.local_rank = r.at("local_rank");
  a.node_rank = r.at("node_rank");
  a.group_rank = r.at("group_rank");
  a.host = r.at("host");
  if (!r.at("gpu").is_null()) a.gpu = r.at("gpu").get<int>();
  return a;
}

}  // namespace

nlohmann::json rank_plan_json(const RankPlan& plan) {
  using nlohmann::json;
  json ranks = json::array(), nodes = json::array();
  for (const auto& r : plan.ranks) ranks.push_back(rank_json(r));
  for (const auto& n : plan.nodes)
    nodes.push_back({{"node_rank", n.node_rank}, {"host", n.host}, {"slots", n.slots},
                     {"ranks", n.ranks}});
  return {{"ranks", ranks}, {"nodes", nodes}};
}

RankPlan rank_plan_from_json(const nlohmann::json& j) {
  RankPlan plan;
  for (const auto& r : j.at("ranks")) plan.ranks.push_back(rank_from_json(r));
  for (const auto& n : j.at("nodes"))
    plan.nodes.push_back({n.at("node_rank"), n.at("host"), n.at("slots"),
                          n.at("ranks").get<std::vector<int>>()});
  return plan;
}

NodeView node_view(const RankPlan& plan, int node_rank) {
  NodeView view{node_rank, plan.world_size(), 0, {}};
  for (const auto& n : plan.nodes) view.nodes_used += !n.ranks.empty();
  for (int rank : plan.nodes.at(size_t(node_rank)).ranks) view.ranks.push_back(plan.ranks.at(size_t(rank)));
  return view;
}

nlohmann::json node_view_json(const NodeView& view) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : view.ranks) ranks.push_back(rank_json(r));
  return {{"node_rank", view.node_rank}, {"world_size", view.world_size},
          {"nodes_used", view.nodes_used}, {"ranks", ranks}};
}

NodeView node_view_from_json(const nlohmann::json& j) {
  NodeView view{j.at("node_rank"), j.at("world_size"), j.at("nodes_used"), {}};
  const auto& ranks = j.at("ranks");
  if (view.world_size < 0 || view.nodes_used < 0 || ranks.size() > size_t(view.world_size))
    throw Error(ErrorKind::Runtime, fmt::format("node {} is given {} ranks of a world of {}",
                                                view.node_rank, ranks.size(), view.world_size));
  for (const auto& r : ranks) view.ranks.push_back(rank_from_json(r));
  return view;
}

void check_node_view(const NodeView& view) {
  for (size_t i = 0; i < view.ranks.size(); ++i) {
    const RankAssignment& a = view.ranks[i];
    if (a.node_rank != view.node_rank || a.rank < 0 || a.rank >= view.world_size || a.local_rank != int(i))
      throw Error(ErrorKind::Runtime, fmt::format("node {} was given rank {} (local rank {}) of node {} "
                                                  "in a world of {}: not a share of one job's plan",
                                                  view.node_rank, a.rank, a.local_rank, a.node_rank,
                                                  view.world_size));
  }
}

}  // namespace muster
