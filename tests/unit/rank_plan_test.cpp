#include "launcher/cluster/rank_plan.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "launcher/error.h"
#include "launcher/cluster/hostfile.h"

namespace muster {
namespace {

// "host:rank/local" for every rank, in rank order.
std::string layout(const RankPlan& plan) {
  std::string out;
  for (const auto& r : plan.ranks)
    out += fmt::format("{}{}:{}/{}", out.empty() ? "" : " ", r.host, r.rank, r.local_rank);
  return out;
}

struct PlanCase {
  const char* hosts;
  std::optional<int> n;
  MapBy map_by;
  const char* expected;
};

TEST(RankPlan, PlacesRanksDeterministically) {
  const PlanCase cases[] = {
      {"a:2,b:2", std::nullopt, MapBy::Slot, "a:0/0 a:1/1 b:2/0 b:3/1"},
      {"a:2,b:2", std::nullopt, MapBy::Node, "a:0/0 b:1/0 a:2/1 b:3/1"},
      {"a:3,b:1", std::nullopt, MapBy::Node, "a:0/0 b:1/0 a:2/1 a:3/2"},
      {"a:2,b:2", 3, MapBy::Slot, "a:0/0 a:1/1 b:2/0"},
      {"a:2,b:2", 3, MapBy::Node, "a:0/0 b:1/0 a:2/1"},
      {"b,a", std::nullopt, MapBy::Slot, "b:0/0 a:1/0"},  // file order, not sorted
      {"n[1-3]:1", 2, MapBy::Slot, "n1:0/0 n2:1/0"},
  };
  for (const auto& c : cases) {
    RankPlan plan = make_rank_plan(parse_host_option(c.hosts), c.n, c.map_by);
    EXPECT_EQ(layout(plan), c.expected) << c.hosts;
  }
}

TEST(RankPlan, EveryRankIsUniqueAndNodesListTheirRanks) {
  RankPlan plan = make_rank_plan(parse_host_option("n[1-5]:3"), std::nullopt, MapBy::Node);
  ASSERT_EQ(plan.world_size(), 15);
  std::vector<int> seen(15, 0);
  for (const auto& node : plan.nodes)
    for (size_t i = 0; i < node.ranks.size(); ++i) {
      const auto& r = plan.ranks[size_t(node.ranks[i])];
      EXPECT_EQ(r.local_rank, int(i));
      EXPECT_EQ(r.node_rank, node.node_rank);
      ++seen[size_t(r.rank)];
    }
  for (int count : seen) EXPECT_EQ(count, 1);
}

TEST(RankPlan, GpuIsTheLocalRankWhenTheNodeHasThatGpu) {
  ClusterSpec cluster = parse_host_option("a,b:2");
  cluster.nodes[0].gpu_count = 4;   // slots auto -> 4 GPUs
  cluster.nodes[1].gpu_count = 0;
  RankPlan plan = make_rank_plan(cluster, std::nullopt, MapBy::Slot);
  ASSERT_EQ(plan.world_size(), 6);
  EXPECT_EQ(plan.ranks[3].gpu, 3);
  EXPECT_FALSE(plan.ranks[4].gpu.has_value());
}

TEST(RankPlan, AutoSlotsWithoutKnownGpusAreOne) {
  RankPlan plan = make_rank_plan(parse_host_option("a,b"), std::nullopt, MapBy::Slot);
  EXPECT_EQ(plan.world_size(), 2);
  EXPECT_FALSE(plan.ranks[0].gpu.has_value());
}

TEST(RankPlan, RefusesMoreRanksThanSlots) {
  try {
    make_rank_plan(parse_host_option("a:2"), 3, MapBy::Slot);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_EQ(std::string(e.what()), "-n 3 asks for more ranks than the 2 slots of -H; lower -n "
                                     "or give nodes more slots");
  }
}

TEST(RankPlan, SlotCountsCannotOverflowTheRankCount) {
  // 1100 nodes of 1024 slots: more ranks than one job may have, said as such.
  ClusterSpec c;
  c.source = "big.yaml";
  for (int i = 0; i < 1100; ++i) c.nodes.push_back(NodeSpec{fmt::format("n{}", i), "", {1024}, {}, {}, {}});
  try {
    make_rank_plan(c, std::nullopt, MapBy::Slot);
    ADD_FAILURE() << "planned more than kMaxRanks ranks";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "big.yaml offers 1126400 slots, more than muster's limit of "
                                     "1048576 ranks in one job; give -n, or fewer slots");
  }
  EXPECT_EQ(make_rank_plan(c, 4, MapBy::Node).world_size(), 4);
}

// torchrun's GROUP_RANK is 0..nodes-1: a node that runs no rank (a spare, one lost before
// the launch, one past -n) leaves no gap, and the nodes after it are not numbered past the
// count of nodes that run ranks.
TEST(RankPlan, GroupRanksCountOnlyTheNodesThatRunRanks) {
  ClusterSpec c;
  for (const char* host : {"a", "idle", "b", "c"}) c.nodes.push_back(NodeSpec{host, "", {1}, {}, {}, {}});
  c.nodes[1].slots.fixed = 0;
  RankPlan plan = make_rank_plan(c, 2, MapBy::Slot);
  ASSERT_EQ(plan.world_size(), 2);
  EXPECT_EQ(plan.ranks[0].node_rank, 0);
  EXPECT_EQ(plan.ranks[0].group_rank, 0);
  EXPECT_EQ(plan.ranks[1].node_rank, 2);
  EXPECT_EQ(plan.ranks[1].group_rank, 1);
  // And so on the node, which gets its share as JSON.
  EXPECT_EQ(rank_plan_from_json(rank_plan_json(plan)).ranks[1].group_rank, 1);
}

NodeSpec planned_node(const std::string& host, std::optional<int> slots, int gpus, bool spare = false) {
  NodeSpec n;
  n.host = host;
  n.slots.fixed = slots;
  n.gpu_count = gpus;
  n.spare = spare;
  return n;
}

// A spare holds no ranks in the plan itself, wherever it is listed.
TEST(RankPlan, ASpareHoldsNoRanks) {
  ClusterSpec cluster;
  cluster.nodes = {planned_node("s", std::nullopt, 4, true), planned_node("a", 2, 0), planned_node("b", 2, 0)};
  const RankPlan plan = make_rank_plan(cluster, std::nullopt, MapBy::Slot);
  EXPECT_EQ(layout(plan), "a:0/0 a:1/1 b:2/0 b:3/1");
  EXPECT_EQ(plan.nodes[0].slots, 0);
  EXPECT_EQ(plan.ranks[0].group_rank, 0);
}

// The share of a node left out moves to a spare: it keeps its slots, rank numbers and group
// rank, and takes the spare's GPUs; the node left out runs none.
TEST(RankPlan, AShareMovedToASpareKeepsItsRanksAndTakesTheSparesGpus) {
  ClusterSpec cluster;
  cluster.nodes = {planned_node("a", std::nullopt, 2), planned_node("b", std::nullopt, 4),
                   planned_node("c", std::nullopt, 2), planned_node("s", std::nullopt, 2, true)};
  const std::vector<bool> usable = {true, false, true, true};
  const RankPlan plan = plan_shares_on_nodes(cluster, {0, 3, 2}, usable, std::nullopt, MapBy::Slot);
  EXPECT_EQ(layout(plan), "a:0/0 a:1/1 s:2/0 s:3/1 s:4/2 s:5/3 c:6/0 c:7/1");
  EXPECT_TRUE(plan.nodes[1].ranks.empty());
  EXPECT_EQ(plan.nodes[3].slots, 4);
  for (int rank : {2, 3, 4, 5}) {
    EXPECT_EQ(plan.ranks[size_t(rank)].node_rank, 3);
    EXPECT_EQ(plan.ranks[size_t(rank)].group_rank, 1);
  }
  EXPECT_EQ(plan.ranks[2].gpu, 0);
  EXPECT_EQ(plan.ranks[3].gpu, 1);
  EXPECT_FALSE(plan.ranks[4].gpu) << "the spare has two GPUs";
  EXPECT_EQ(plan.ranks[7].group_rank, 2);

  // On the working nodes (the first attempt's plan), a node not usable runs none.
  const RankPlan first = plan_shares_on_nodes(cluster, {0, 1, 2}, usable, std::nullopt, MapBy::Slot);
  EXPECT_EQ(layout(first), "a:0/0 a:1/1 c:2/0 c:3/1");
  EXPECT_EQ(first.ranks[2].group_rank, 1);
}

}  // namespace
}  // namespace muster
