// muster health --record: this node's healthy facts kept as its expectations, checked later
// through the cluster file's comparisons; a port ACTIVE at record time and down now fails.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/support/node_tree.h"
#include "tests/support/state_dir.h"
#include "topology/health/health.h"
#include "topology/health/node_record.h"

namespace muster {
namespace {

using testing::NodeTree;

using testing::StateDir;

// The checks as check_this_node makes them: the record beneath the cluster file's `expect`.
NodeHealth check(const NodeTree& tree, const StateDir& state, const HealthExpectations& file_expect = {}) {
  std::string why_not;
  const HealthExpectations expect = with_node_record(file_expect, tree.root(), state.path(), why_not);
  EXPECT_EQ(why_not, "");
  return check_node_health({tree.root(), nullptr, nullptr, "not asked", ""}, expect);
}

std::vector<HealthFinding> failed(const NodeHealth& h, const std::string& check) {
  std::vector<HealthFinding> out;
  for (const auto& f : h.findings)
    if (f.check == check && f.status == HealthStatus::Fail) out.push_back(f);
  return out;
}

RecordedNode record(const NodeTree& tree, const StateDir& state) {
  return record_node({tree.root(), nullptr, nullptr, "not asked", ""}, state.path());
}

// The healthy node with a second HCA port, both ACTIVE.
void two_port_node(NodeTree& tree) {
  tree.healthy_gpu_node();
  tree.ib_port("mlx5_0", "0000:3b:00.0", 2, "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)");
}

TEST(HealthRecord, AHealthyNodesFactsAreRecorded) {
  NodeTree tree;
  two_port_node(tree);
  StateDir state;
  const RecordedNode r = record(tree, state);
  ASSERT_TRUE(r.saved) << r.why_not;
  EXPECT_EQ(r.record.gpus_per_node, 2);
  EXPECT_EQ(r.record.pcie_gen, 5);
  EXPECT_EQ(r.record.pcie_width, 16);
  EXPECT_EQ(r.record.ib_ports, 2);
  EXPECT_EQ(r.record.ib_rate_gbps, 400);
  EXPECT_EQ(r.record.active_ib_ports, (std::vector<std::string>{"mlx5_0 port 1", "mlx5_0 port 2"}));
  EXPECT_TRUE(failed(check(tree, state), "ib_port").empty());
  EXPECT_NE(node_record_text(r.record).find("2 GPUs"), std::string::npos) << node_record_text(r.record);
}

TEST(HealthRecord, APortActiveAtRecordTimeAndDownNowFailsNamingItAndItsState) {
  NodeTree tree;
  two_port_node(tree);
  StateDir state;
  ASSERT_TRUE(record(tree, state).saved);
  tree.ib_port("mlx5_0", "0000:3b:00.0", 2, "1: DOWN", "2: Polling", "400 Gb/sec (4X NDR)");
  // The cluster file expects one port: without the record the down port is only a warning.
  HealthExpectations one_port;
  one_port.ib_ports = 1;
  auto ib = failed(check(tree, state, one_port), "ib_port");
  ASSERT_EQ(ib.size(), 1u);
  EXPECT_EQ(ib[0].device, "mlx5_0 port 2 (0000:3b:00.0)");
  EXPECT_NE(ib[0].observed.find("state 1: DOWN, phys_state 2: Polling"), std::string::npos) << ib[0].observed;
  EXPECT_NE(ib[0].expected_from.find("ACTIVE in this node's record of "), std::string::npos) << ib[0].expected_from;
}

TEST(HealthRecord, AMissingGpuAndANarrowerLinkFailAgainstTheRecord) {
  NodeTree tree;
  tree.healthy_gpu_node();
  StateDir state;
  ASSERT_TRUE(record(tree, state).saved);
  // The second GPU's card and the port above it now train at x8 at most: healthy against
  // their own maxima, narrower than recorded.
  for (const char* dir : {"sys/devices/pci0000:00/0000:29:00.0/", "sys/devices/pci0000:00/0000:29:00.0/0000:2a:00.0/"}) {
    tree.write(std::string(dir) + "current_link_width", "8");
    tree.write(std::string(dir) + "max_link_width", "8");
  }
  auto pcie = failed(check(tree, state), "pcie_link");
  ASSERT_EQ(pcie.size(), 1u);
  EXPECT_NE(pcie[0].device.find("0000:2a:00.0"), std::string::npos);
  EXPECT_NE(pcie[0].expected_from.find("this node's record of "), std::string::npos) << pcie[0].expected_from;

  std::filesystem::remove(tree.root() + "/sys/bus/pci/devices/0000:2a:00.0");
  auto count = failed(check(tree, state), "gpu_count");
  ASSERT_EQ(count.size(), 1u);
  EXPECT_EQ(count[0].expected, "2");
  EXPECT_NE(count[0].expected_from.find("this node's record of "), std::string::npos);
}

TEST(HealthRecord, TheClusterFilesExpectationsWinAndASickNodeIsNotRecorded) {
  NodeTree tree;
  tree.healthy_gpu_node();
  StateDir state;
  ASSERT_TRUE(record(tree, state).saved);
  HealthExpectations file;
  file.gpus_per_node = 4;
  std::string why_not;
  auto merged = with_node_record(file, tree.root(), state.path(), why_not);
  EXPECT_EQ(merged.gpus_per_node, 4);
  EXPECT_EQ(merged.from("gpus_per_node"), "expect.gpus_per_node");
  EXPECT_EQ(merged.pcie_width, 16);

  tree.write("sys/devices/pci0000:00/0000:29:00.0/0000:2a:00.0/current_link_width", "8");
  const RecordedNode sick = record(tree, state);
  EXPECT_FALSE(sick.saved);
  EXPECT_NE(sick.why_not.find("a check fails"), std::string::npos) << sick.why_not;
}

TEST(HealthRecord, ARecordOfAnotherMachineIsNotApplied) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.write("etc/machine-id", "aaaa");
  StateDir state;
  ASSERT_TRUE(record(tree, state).saved);
  tree.write("etc/machine-id", "bbbb");
  std::string why_not;
  EXPECT_FALSE(with_node_record({}, tree.root(), state.path(), why_not).gpus_per_node);
  tree.write("etc/machine-id", "aaaa");
  EXPECT_EQ(with_node_record({}, tree.root(), state.path(), why_not).gpus_per_node, 2);
}

// Nodes whose state directory is one shared home each keep a record: the second node's
// --record does not replace the first's.
TEST(HealthRecord, NodesSharingAStateDirectoryKeepARecordEach) {
  NodeTree four, eight;  // two machines of one model
  four.healthy_gpu_node();
  four.write("etc/machine-id", "aaaa");
  eight.healthy_gpu_node();
  eight.write("etc/machine-id", "bbbb");
  StateDir state;
  ASSERT_TRUE(record(four, state).saved);
  ASSERT_TRUE(record(eight, state).saved);
  EXPECT_TRUE(std::filesystem::exists(state.path() + "/node.aaaa.record"));
  EXPECT_TRUE(std::filesystem::exists(state.path() + "/node.bbbb.record"));
  std::string why_not;
  EXPECT_EQ(with_node_record({}, four.root(), state.path(), why_not).gpus_per_node, 2) << why_not;
  EXPECT_EQ(with_node_record({}, eight.root(), state.path(), why_not).gpus_per_node, 2) << why_not;
}

}  // namespace
}  // namespace muster
