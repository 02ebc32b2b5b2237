// The head's comparison of nodes' hardware: within one model only, by what a node of that
// model has, so that the healthy node among sick ones and a cluster of two models are not
// failed.
#include <gtest/gtest.h>

#include "launcher/job/health_check.h"

namespace muster {
namespace {

NodeSoftware node(const std::string& model, int gpus, const std::string& gpu_model = "NVIDIA H100 80GB HBM3") {
  NodeSoftware s;
  s.hardware_model = model;
  s.gpu_model = gpu_model;
  s.nvidia_gpus = gpus;
  s.nvidia_driver = "550.54.15";
  s.kernel = "6.1.0";
  return s;
}

std::vector<HealthFinding> failed(const std::vector<HealthFinding>& findings) {
  std::vector<HealthFinding> out;
  for (const auto& f : findings)
    if (f.status == HealthStatus::Fail) out.push_back(f);
  return out;
}

TEST(HealthPeers, TwoOfThreeLostAGpuTheHealthyOneIsNotFailedAndTheOthersAreWarned) {
  auto d = differences_across_nodes({node("Dell XE9680", 8), node("Dell XE9680", 7), node("Dell XE9680", 7)});
  EXPECT_TRUE(d[0].empty()) << d[0][0].summary();
  for (size_t k : {1u, 2u}) {
    ASSERT_EQ(d[k].size(), 1u) << k;
    EXPECT_EQ(d[k][0].status, HealthStatus::Warn);
    EXPECT_EQ(d[k][0].observed, "NVIDIA GPUs on the PCI bus 7");
    EXPECT_EQ(d[k][0].expected, "8");
    EXPECT_NE(d[k][0].expected_from.find("no majority"), std::string::npos) << d[k][0].expected_from;
  }
}

TEST(HealthPeers, AClusterOfTwoModelsIsNotFailedForTheMix) {
  auto d = differences_across_nodes({node("Dell XE9680", 8), node("Dell XE9680", 8),
                                     node("Supermicro AS-4124GO", 4, "NVIDIA A100-SXM4-80GB"),
                                     node("Supermicro AS-4124GO", 4, "NVIDIA A100-SXM4-80GB")});
  for (size_t k = 0; k < d.size(); ++k) EXPECT_TRUE(failed(d[k]).empty()) << k << ": " << d[k][0].summary();
  // Without DMI, the GPU model groups them just as well.
  d = differences_across_nodes({node("", 8), node("", 8), node("", 4, "NVIDIA A100-SXM4-80GB")});
  for (size_t k = 0; k < d.size(); ++k) EXPECT_TRUE(failed(d[k]).empty()) << k << ": " << d[k][0].summary();
}

TEST(HealthPeers, WithinAModelTheOddOneFailsNamedBesideItsPeers) {
  auto d = differences_across_nodes({node("Dell XE9680", 8), node("Dell XE9680", 7), node("Dell XE9680", 8),
                                     node("Supermicro AS-4124GO", 4, "NVIDIA A100-SXM4-80GB")});
  EXPECT_TRUE(d[0].empty());
  EXPECT_TRUE(d[2].empty());
  EXPECT_TRUE(d[3].empty());
  ASSERT_EQ(d[1].size(), 1u);
  EXPECT_EQ(d[1][0].status, HealthStatus::Fail);
  EXPECT_EQ(d[1][0].check, "same_hardware");
  EXPECT_EQ(d[1][0].expected, "8");
  EXPECT_EQ(d[1][0].expected_from, "most nodes of its model (Dell XE9680)");
}

TEST(HealthPeers, ANodeThatLostEveryGpuIsStillComparedInAClusterOfOneModel) {
  // Its GPU model is gone with its GPUs; without DMI it joins the one model there is, warned
  // (it may be a CPU-only node), not failed.
  auto d = differences_across_nodes({node("", 8), node("", 8), node("", 0, "")});
  ASSERT_FALSE(d[2].empty());
  EXPECT_EQ(d[2][0].observed, "NVIDIA GPUs on the PCI bus 0");
  for (const auto& f : d[2]) EXPECT_EQ(f.status, HealthStatus::Warn) << f.summary();
  EXPECT_TRUE(d[0].empty());
  // With DMI it is its model's node that lost them: failed.
  d = differences_across_nodes({node("Dell XE9680", 8), node("Dell XE9680", 8), node("Dell XE9680", 0, "")});
  ASSERT_FALSE(failed(d[2]).empty());
  // Among several models it cannot be placed: unknown, never a pass.
  d = differences_across_nodes({node("", 8), node("", 4, "NVIDIA A100-SXM4-80GB"), node("", 0, "")});
  ASSERT_EQ(d[2].size(), 1u);
  EXPECT_EQ(d[2][0].status, HealthStatus::Unknown);
}

TEST(HealthPeers, SoftwareIsComparedAcrossModels) {
  NodeSoftware odd = node("Supermicro AS-4124GO", 4, "NVIDIA A100-SXM4-80GB");
  odd.nvidia_driver = "535.104.05";
  auto d = differences_across_nodes({node("Dell XE9680", 8), node("Dell XE9680", 8), odd});
  ASSERT_EQ(d[2].size(), 1u);
  EXPECT_EQ(d[2][0].check, "same_software");
  EXPECT_EQ(d[2][0].status, HealthStatus::Warn);
}

}  // namespace
}  // namespace muster
