// A job that survives a node, on the test cluster: a node cut off mid-job is left out and its
// ranks move to the spare; a rank that always fails is started again in place until the
// restarts are spent; and nothing of any attempt is left running on any node.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/support/command_runner.h"
#include "tests/support/node_tree.h"
#include "tests/support/test_cluster.h"

namespace muster::testing {
namespace {

using std::chrono::milliseconds;

// What each rank wrote, by file name ("att.<restart count>.<rank>"): its host, the restart
// counts it saw, its MASTER_PORT and its pid.
struct RankRecord {
  std::string host, muster_count, torch_count, port;
  pid_t pid = 0;
  std::string group_rank;
};
std::map<std::string, RankRecord> rank_records(const TempDir& dir) {
  std::map<std::string, RankRecord> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("att.", 0) != 0) continue;
    std::ifstream in(entry.path());
    RankRecord r;
    if (in >> r.host >> r.muster_count >> r.torch_count >> r.port >> r.pid >> r.group_rank) out[name] = r;
  }
  return out;
}
size_t records_of_attempt(const std::map<std::string, RankRecord>& records, int count) {
  const std::string prefix = fmt::format("att.{}.", count);
  return size_t(std::count_if(records.begin(), records.end(), [&](const auto& r) { return r.first.rfind(prefix, 0) == 0; }));
}

// Each rank records itself: written whole under a name rank_records passes over, then renamed,
// so that a reader never sees half a record nor counts one twice.
std::string recording(const TempDir& dir, const std::string& then) {
  const std::string name = "att.$MUSTER_RESTART_COUNT.$RANK";
  return fmt::format("echo \"$(hostname) $MUSTER_RESTART_COUNT $TORCHELASTIC_RESTART_COUNT $MASTER_PORT $$ $GROUP_RANK\" > {0}/writing.{1} && "
                     "mv {0}/writing.{1} {0}/{1}; {2}",
                     dir.path(), name, then);
}

bool all_gone_within(const std::map<std::string, RankRecord>& records, milliseconds limit) {
  return wait_until([&] {
    return std::none_of(records.begin(), records.end(), [](const auto& r) { return process_alive(r.second.pid); });
  }, limit);
}

// Bad input is an error naming the problem, and nothing starts (the ranks would touch a file).
TEST(RestartsCli, BadInputStartsNothingAndExits2) {
  TempDir dir;
  const std::vector<std::string> job = {"--", "touch", dir.file("started")};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "run");
    args.insert(args.end(), job.begin(), job.end());
    return run_muster(args);
  };
  auto negative = with({"--restarts", "-1"});
  EXPECT_EQ(negative.exit_code, 2);
  EXPECT_NE(negative.err.find("--restarts: -1 is out of range"), std::string::npos) << negative.err;
  auto all_spare = with({"-H", "a,b", "--spares", "2"});
  EXPECT_EQ(all_spare.exit_code, 2);
  EXPECT_NE(all_spare.err.find("--spares 2 leaves no node of the 2 in -H to run the job"), std::string::npos)
      << all_spare.err;
  auto here = with({"--spares", "1"});
  EXPECT_EQ(here.exit_code, 2);
  EXPECT_NE(here.err.find("--spares needs a cluster of several nodes"), std::string::npos) << here.err;
  dir.write("all-spare.yaml", "nodes:\n  - host: a\n    spare: true\n");
  auto file = with({"-f", dir.file("all-spare.yaml")});
  EXPECT_EQ(file.exit_code, 2);
  EXPECT_NE(file.err.find("every node of"), std::string::npos) << file.err;
  auto both = with({"-H", "a,b,c", "-N", "2", "--spares", "1"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--spares and --nodes cannot be used together"), std::string::npos) << both.err;
  auto too_many = with({"-H", "a,b", "--nodes", "3"});
  EXPECT_EQ(too_many.exit_code, 2);
  EXPECT_NE(too_many.err.find("--nodes 3: -H has 2 nodes; give 1 to 2"), std::string::npos) << too_many.err;
  auto drain_alone = with({"-H", "a,b", "--drain-bad"});
  EXPECT_EQ(drain_alone.exit_code, 2);
  EXPECT_NE(drain_alone.err.find("give --restarts N as well"), std::string::npos) << drain_alone.err;
  auto drain_ssh = with({"-H", "a,b", "--restarts", "1", "--drain-bad"});
  EXPECT_EQ(drain_ssh.exit_code, 2);
  EXPECT_NE(drain_ssh.err.find("--drain-bad drains nodes in Slurm"), std::string::npos) << drain_ssh.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("started")));
}

// --timeout bounds the whole job: attempt 0 fails after 2 s and attempt 1 would finish 2 s
// later, past the job's 3 s; with a fresh clock per attempt it completed.
TEST(RestartsCli, TheTimeoutBoundsTheWholeJobNotEachAttempt) {
  auto r = run_muster({"run", "-n", "1", "--timeout", "3", "--restarts", "1", "--grace", "1", "--", "sh", "-c",
                       "if [ \"$MUSTER_RESTART_COUNT\" = 0 ]; then sleep 2; exit 1; fi; sleep 2"});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_NE(r.err.find("ran past --timeout 3s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("muster: 2 attempts:"), std::string::npos) << r.err;
}

class RestartsCluster : public ::testing::Test {
 protected:
  void start(int hosts) {
    cluster_ = std::make_unique<TestCluster>(hosts);
    file_ = cluster_->write_cluster_file("launch:\n  slots: 2\n");
  }
  std::string head_address() const {
    return cluster_->address(0).substr(0, cluster_->address(0).rfind('.')) + ".254";
  }
  std::unique_ptr<TestCluster> cluster_;
  std::string file_;
};

TEST_F(RestartsCluster, ANodeCutOffMidJobIsLeftOutAndItsRanksMoveToTheSpare) {
  MUSTER_REQUIRE_TEST_CLUSTER();
  start(5);
  TempDir dir;
  RunningCommand head(cluster_->muster_argv({"run", "-f", file_, "--spares", "1", "--restarts", "2",
                                             "--heartbeat-timeout", "5", "--grace", "2", "--", "sh", "-c",
                                             recording(dir, "sleep 20")}));
  ASSERT_TRUE(wait_until([&] { return records_of_attempt(rank_records(dir), 0) == 8; }, milliseconds(60000)));
  const auto first = rank_records(dir);
  // No FIN, no RST: node3's packets to the head vanish, as when it loses power.
  ASSERT_EQ(cluster_->on_host(2, {"ip", "route", "add", "blackhole", head_address() + "/32"}).exit_code, 0);
  auto r = head.wait(std::chrono::seconds(150));
  // Its agent stops the first attempt's ranks once the head falls silent to it.
  const bool first_left = !all_gone_within(first, milliseconds(15000));
  cluster_->on_host(2, {"ip", "route", "del", "blackhole", head_address() + "/32"});
  const auto records = rank_records(dir);

  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const auto& [name, rec] : first) EXPECT_NE(rec.host, cluster_->host(4)) << "the spare ran ranks at first";
  ASSERT_EQ(records_of_attempt(records, 1), 8u) << r.err;
  EXPECT_EQ(records_of_attempt(records, 2), 0u) << r.err;
  std::set<std::string> second_hosts;
  for (const auto& [name, rec] : records) {
    if (name.rfind("att.1.", 0) != 0) continue;
    EXPECT_EQ(rec.muster_count, "1");
    EXPECT_EQ(rec.torch_count, "1");
    EXPECT_NE(rec.host, cluster_->host(2)) << name << " ran on the node that was cut off";
    EXPECT_NE(rec.port, first.begin()->second.port) << "MASTER_PORT was used again";
    second_hosts.insert(rec.host);
  }
  // Ranks 4 and 5 were node3's; the spare runs them now, and the others keep theirs.
  EXPECT_EQ(records.at("att.1.4").host, cluster_->host(4));
  EXPECT_EQ(records.at("att.1.5").host, cluster_->host(4));
  EXPECT_EQ(records.at("att.1.0").host, first.at("att.0.0").host);
  // The spare takes node3's place among the nodes too: torchrun's GROUP_RANK stays 0..3.
  EXPECT_EQ(records.at("att.1.4").group_rank, "2");
  EXPECT_EQ(records.at("att.1.5").group_rank, "2");
  EXPECT_EQ(records.at("att.1.7").group_rank, "3");
  EXPECT_EQ(second_hosts.size(), 4u);
  EXPECT_NE(r.err.find("left out: node3: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("its ranks moved to node5"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("muster: 2 attempts:"), std::string::npos) << r.err;
  for (size_t at = r.err.find("muster:   attempt"); at != std::string::npos; at = r.err.find("muster:   attempt", at + 1))
    std::printf("%s\n", r.err.substr(at, r.err.find('\n', at) - at).c_str());
  EXPECT_FALSE(first_left) << "ranks of the first attempt were left running";
  EXPECT_TRUE(all_gone_within(records, milliseconds(15000))) << "ranks were left running";
}

TEST_F(RestartsCluster, ARankThatAlwaysFailsIsRestartedInPlaceUntilTheRestartsAreSpent) {
  MUSTER_REQUIRE_TEST_CLUSTER();
  start(4);
  TempDir dir;
  auto r = cluster_->muster({"run", "-f", file_, "--restarts", "2", "--grace", "2", "--json", "--", "sh", "-c",
                             recording(dir, "if [ $RANK = 1 ]; then exit 3; fi; sleep 30")});
  const auto records = rank_records(dir);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  std::set<std::string> ports;
  for (int count = 0; count < 3; ++count) {
    const std::string name = fmt::format("att.{}.1", count);
    ASSERT_TRUE(records.count(name)) << name << "\n" << r.err;
    EXPECT_EQ(records.at(name).host, cluster_->host(0)) << "rank 1 moved: a bug in the job ate a node";
    EXPECT_EQ(records.at(name).muster_count, std::to_string(count));
    ports.insert(records.at(name).port);
  }
  EXPECT_EQ(ports.size(), 3u) << "MASTER_PORT was used again";
  EXPECT_EQ(records_of_attempt(records, 3), 0u);
  EXPECT_NE(r.err.find("muster: 3 attempts:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("none: the 2 restarts were spent"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("left out"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("{\"events\":[{\"action\":\"restarted in place"), std::string::npos) << r.out;
  EXPECT_TRUE(all_gone_within(records, milliseconds(15000))) << "ranks were left running";
}

TEST_F(RestartsCluster, ANodeThatFailsItsHealthCheckAfterARankFailureIsLeftOut) {
  MUSTER_REQUIRE_TEST_CLUSTER();
  // node2 reads a sick machine's files: a GPU's PCIe link trained at x8, an IB port down.
  NodeTree sick;
  sick.healthy_gpu_node();
  sick.write("sys/devices/pci0000:00/0000:29:00.0/0000:2a:00.0/current_link_width", "8");
  sick.write("sys/devices/pci0000:00/0000:29:00.0/current_link_width", "8");
  sick.ib_port("mlx5_0", "0000:3b:00.0", 2, "1: DOWN", "2: Polling", "100 Gb/sec (4X EDR)");
  cluster_ = std::make_unique<TestCluster>(4);
  HostSetup sick_host;
  sick_host.environment.push_back("MUSTER_HEALTH_FSROOT=" + sick.root());
  cluster_->set_up_host(1, sick_host);
  file_ = cluster_->write_cluster_file("launch:\n  slots: 2\n");
  TempDir dir;
  // Rank 0 (on a healthy node) fails the first attempt; the check after it finds node2 sick.
  auto r = cluster_->muster({"run", "-f", file_, "--spares", "1", "--restarts", "1", "--grace", "2", "--", "sh", "-c",
                             recording(dir, "if [ $MUSTER_RESTART_COUNT = 0 ] && [ $RANK = 0 ]; then exit 1; fi; sleep 1")});
  const auto records = rank_records(dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("left out: node2: failed its health check: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("its ranks moved to node4"), std::string::npos) << r.err;
  ASSERT_EQ(records_of_attempt(records, 1), 6u) << r.err;
  EXPECT_EQ(records.at("att.1.2").host, cluster_->host(3));
  EXPECT_EQ(records.at("att.1.3").host, cluster_->host(3));
  EXPECT_EQ(records.at("att.1.0").host, cluster_->host(0)) << "rank 0's failure moved a healthy node";
  EXPECT_TRUE(all_gone_within(records, milliseconds(15000))) << "ranks were left running";
}

}  // namespace
}  // namespace muster::testing
