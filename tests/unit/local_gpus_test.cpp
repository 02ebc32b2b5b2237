#include "launcher/cluster/local_gpus.h"

#include <gtest/gtest.h>

#include "launcher/cluster/hostfile.h"
#include "launcher/cluster/rank_plan.h"
#include "tests/fakes/recording_topology_source.h"

namespace muster {
namespace {

Topology with_gpus(int n) {
  Topology t;
  for (int i = 0; i < n; ++i) t.gpus.push_back(Gpu{i});
  return t;
}

TEST(LocalGpus, SlotsAutoOnThisMachineBecomeItsGpuCount) {
  testing::RecordingTopologySource source(with_gpus(4));
  ClusterSpec cluster = parse_host_option("localhost,remote1:2");
  auto topology = learn_local_gpus(cluster, source);
  ASSERT_TRUE(topology.has_value());
  EXPECT_EQ(source.loads, 1);
  EXPECT_EQ(cluster.nodes[0].gpu_count, 4);
  EXPECT_FALSE(cluster.nodes[1].gpu_count.has_value());
  RankPlan plan = make_rank_plan(cluster, std::nullopt, MapBy::Slot);
  EXPECT_EQ(plan.world_size(), 6);
  EXPECT_EQ(plan.ranks[3].gpu, 3);
  EXPECT_FALSE(plan.ranks[4].gpu.has_value());
}

TEST(LocalGpus, ARemoteOnlyClusterDoesNotDiscoverThisMachine) {
  testing::RecordingTopologySource source(with_gpus(8));
  ClusterSpec cluster = parse_host_option("remote1,remote2");
  EXPECT_FALSE(learn_local_gpus(cluster, source).has_value());
  EXPECT_EQ(source.loads, 0);
}

TEST(LocalGpus, WithoutGpusAutoIsOneSlot) {
  testing::RecordingTopologySource source(with_gpus(0));
  ClusterSpec cluster = this_machine_cluster();
  learn_local_gpus(cluster, source);
  RankPlan plan = make_rank_plan(cluster, std::nullopt, MapBy::Slot);
  EXPECT_EQ(plan.world_size(), 1);
  EXPECT_FALSE(plan.ranks[0].gpu.has_value());
}

}  // namespace
}  // namespace muster
