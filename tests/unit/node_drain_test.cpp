// muster health --drain's rule, as NHC keeps it, against a recording fake of scontrol: drain a
// sick node with muster's reason, resume only what muster drained, never touch another's drain.
#include <gtest/gtest.h>

#include "launcher/error.h"
#include "launcher/job/node_drain.h"

namespace muster {
namespace {

class RecordingSlurm : public SlurmNodeControl {
 public:
  SlurmNodeState state;
  std::vector<std::string> calls;  // "drain NODE REASON", "resume NODE"

  SlurmNodeState state_of(const std::string& node) override {
    calls.push_back("show " + node);
    return state;
  }
  void drain(const std::string& node, const std::string& reason) override {
    calls.push_back("drain " + node + " " + reason);
  }
  void resume(const std::string& node) override { calls.push_back("resume " + node); }
};

TEST(NodeDrain, ScontrolsLineIsReadWithItsReasonWithoutWhoSetIt) {
  auto s = parse_scontrol_node(
      "NodeName=node1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=IDLE+DRAIN ThreadsPerCore=1 "
      "Partitions=debug Reason=muster: GPU1 0000:2a:00.0: PCIe link x8 [root@2026-11-25T19:00:00]\n");
  EXPECT_EQ(s.state, "IDLE+DRAIN");
  EXPECT_TRUE(s.drain);
  EXPECT_EQ(s.reason, "muster: GPU1 0000:2a:00.0: PCIe link x8");
  auto idle = parse_scontrol_node("NodeName=node2 Arch=x86_64 State=IDLE ThreadsPerCore=1 Partitions=debug\n");
  EXPECT_FALSE(idle.drain);
  EXPECT_EQ(idle.reason, "");
  EXPECT_THROW(parse_scontrol_node("Node node3 not found"), Error);
}

TEST(NodeDrain, ASickNodeIsDrainedWithTheFirstFindingAndAHealthyOneLeftAlone) {
  RecordingSlurm slurm;
  slurm.state = {"IDLE", false, ""};
  auto healthy = drain_or_resume(slurm, "node1", std::nullopt);
  EXPECT_EQ(healthy.action, DrainOutcome::Action::None);
  EXPECT_EQ(slurm.calls, std::vector<std::string>{"show node1"});

  slurm.calls.clear();
  auto sick = drain_or_resume(slurm, "node1", "GPU1 0000:2a:00.0: PCIe link x8");
  EXPECT_EQ(sick.action, DrainOutcome::Action::Drained);
  EXPECT_EQ(slurm.calls, (std::vector<std::string>{"show node1", "drain node1 muster: GPU1 0000:2a:00.0: PCIe link x8"}));
}

TEST(NodeDrain, OnlyMustersOwnDrainIsResumedOrReworded) {
  RecordingSlurm slurm;
  slurm.state = {"IDLE+DRAIN", true, "muster: mlx5_0 port 1: state 1: DOWN"};
  EXPECT_EQ(drain_or_resume(slurm, "node1", std::nullopt).action, DrainOutcome::Action::Resumed);
  EXPECT_EQ(slurm.calls.back(), "resume node1");
  // Still sick for the same reason: nothing to change; for another: the reason is renewed.
  slurm.calls.clear();
  EXPECT_EQ(drain_or_resume(slurm, "node1", "mlx5_0 port 1: state 1: DOWN").action, DrainOutcome::Action::None);
  EXPECT_EQ(slurm.calls.size(), 1u);
  EXPECT_EQ(drain_or_resume(slurm, "node1", "GPU0: Xid 79").action, DrainOutcome::Action::Drained);

  // An administrator's drain stays as they left it, sick or healthy.
  slurm.state = {"IDLE+DRAIN", true, "admin: new fans"};
  slurm.calls.clear();
  for (auto failure : {std::optional<std::string>("GPU0: Xid 79"), std::optional<std::string>()}) {
    auto outcome = drain_or_resume(slurm, "node1", failure);
    EXPECT_EQ(outcome.action, DrainOutcome::Action::LeftAlone);
    EXPECT_EQ(outcome.message, "node1 stays drained as someone else left it: admin: new fans");
  }
  EXPECT_EQ(slurm.calls, (std::vector<std::string>{"show node1", "show node1"}));
}

// A node muster drained whose failing check now cannot be made (NVML and the driver out of
// step): unknown is not healthy, so it stays drained, saying why; an undrained node with an
// unknown check is left alone (unknown alone is a warning, not a drain).
TEST(NodeDrain, ANodeWhoseChecksAreUnknownIsNeverResumed) {
  RecordingSlurm slurm;
  slurm.state = {"IDLE+DRAIN", true, "muster: GPU0: ECC errors"};
  const auto outcome = drain_or_resume(slurm, "node1", std::nullopt, "gpu: unknown: NVML driver/library mismatch");
  EXPECT_EQ(outcome.action, DrainOutcome::Action::None);
  EXPECT_EQ(outcome.message, "node1 stays drained (muster: GPU0: ECC errors): a check could not be made "
                             "(gpu: unknown: NVML driver/library mismatch); it is resumed once every check passes");
  EXPECT_EQ(slurm.calls, std::vector<std::string>{"show node1"});
  slurm.state = {"IDLE", false, ""};
  slurm.calls.clear();
  EXPECT_EQ(drain_or_resume(slurm, "node1", std::nullopt, "gpu: unknown").action, DrainOutcome::Action::None);
  EXPECT_EQ(slurm.calls, std::vector<std::string>{"show node1"});
}

TEST(NodeDrain, TheNodesNameIsSlurmdsElseTheShortHostName) {
  setenv("SLURMD_NODENAME", "gpu-a07", 1);
  EXPECT_EQ(this_slurm_node(), "gpu-a07");
  unsetenv("SLURMD_NODENAME");
  EXPECT_EQ(this_slurm_node().find('.'), std::string::npos);
  EXPECT_FALSE(this_slurm_node().empty());
}

}  // namespace
}  // namespace muster
