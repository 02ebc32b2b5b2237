// A job never hangs and nothing is left behind: a node that loses its network or freezes,
// Ctrl-C at every stage, and hostile clients on the job's servers, on the test cluster.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/build_paths.h"
#include "tests/support/test_cluster.h"

namespace muster::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string comm_of(pid_t pid) {
  std::string name = process_file(pid, "comm");
  return name.substr(0, name.find('\n'));
}

std::set<pid_t> rank_pids(const TempDir& dir) {
  std::set<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    if (entry.path().filename().string().rfind("pid.", 0) == 0) {
      std::ifstream in(entry.path());
      pid_t pid = 0;
      if (in >> pid) pids.insert(pid);
    }
  return pids;
}

bool all_gone_within(const std::set<pid_t>& pids, milliseconds limit) {
  return wait_until([&] {
    return std::none_of(pids.begin(), pids.end(), [](pid_t p) { return process_alive(p); });
  }, limit);
}

class ReliabilityCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    MUSTER_REQUIRE_TEST_CLUSTER();
    cluster_ = std::make_unique<TestCluster>(4);
    file_ = cluster_->write_cluster_file("launch:\n  slots: 2\n");
  }
  // 4 hosts x 2 ranks that record their pids and print without pause; returns once all run.
  std::unique_ptr<RunningCommand> start_printing_job(const TempDir& dir,
                                                     const std::vector<std::string>& flags = {}) {
    std::vector<std::string> args = {"run", "-f", file_, "--heartbeat-timeout", "5", "--grace", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", "sh", "-c", "echo $$ > " + dir.path() +
                                                   "/pid.$RANK; while true; do echo tick $RANK; sleep 0.02; done"});
    auto head = std::make_unique<RunningCommand>(cluster_->muster_argv(args));
    EXPECT_TRUE(wait_until([&] { return rank_pids(dir).size() == 8; }, milliseconds(60000)));
    return head;
  }
  // The head address as the hosts see it.
  std::string head_address() const {
    return cluster_->address(0).substr(0, cluster_->address(0).rfind('.')) + ".254";
  }
  std::unique_ptr<TestCluster> cluster_;
  std::string file_;
};

// Heartbeat timeout 5 s + grace 2 s + 5 s: the bound the head must end within.
constexpr milliseconds kEndsWithin{12000};

TEST_F(ReliabilityCluster, ANodeThatLosesItsNetworkEndsTheJobNamingIt) {
  TempDir dir;
  auto head = start_printing_job(dir);
  const auto pids = rank_pids(dir);
  // No FIN, no RST: node3's packets to the head vanish, as when it loses power.
  ASSERT_EQ(cluster_->on_host(2, {"ip", "route", "add", "blackhole", head_address() + "/32"}).exit_code, 0);
  const auto cut = Clock::now();
  auto r = head->wait(std::chrono::seconds(60));
  const auto took = Clock::now() - cut;
  std::printf("the head ended %.1f s after the cut\n", std::chrono::duration<double>(took).count());
  const bool left = !all_gone_within(pids, kEndsWithin);
  cluster_->on_host(2, {"ip", "route", "del", "blackhole", head_address() + "/32"});
  EXPECT_EQ(r.exit_code, 255) << r.err;
  EXPECT_LT(took, kEndsWithin) << "the head hung on a lost node";
  EXPECT_NE(r.err.find("muster: warning: lost contact with node3: nothing heard from it for"),
            std::string::npos) << r.err;
  EXPECT_FALSE(left) << "ranks were left running";
}

TEST_F(ReliabilityCluster, ANodeWhoseProcessesAreFrozenEndsTheJobNamingIt) {
  TempDir dir;
  auto head = start_printing_job(dir);
  const auto pids = rank_pids(dir);
  // node2's SSH session and agent stop dead (a hung kernel, a node swapping to death).
  std::vector<pid_t> frozen;
  for (pid_t pid : cluster_->processes_on(1)) {
    const std::string comm = comm_of(pid);
    const bool session = comm == "sshd" && process_file(pid, "cmdline").find("-D") == std::string::npos;
    if (session || comm == "muster") frozen.push_back(pid);
  }
  ASSERT_FALSE(frozen.empty());
  for (pid_t pid : frozen) kill(pid, SIGSTOP);
  const auto froze = Clock::now();
  auto r = head->wait(std::chrono::seconds(60));
  const auto took = Clock::now() - froze;
  std::printf("the head ended %.1f s after the freeze\n", std::chrono::duration<double>(took).count());
  for (pid_t pid : frozen) kill(pid, SIGCONT);
  EXPECT_EQ(r.exit_code, 255) << r.err;
  EXPECT_LT(took, kEndsWithin) << "the head hung on a frozen node";
  EXPECT_NE(r.err.find("lost contact with node2: nothing heard from it for"), std::string::npos) << r.err;
  // Thawed, node2's agent finds the head gone and stops its ranks too.
  EXPECT_TRUE(all_gone_within(pids, kEndsWithin)) << "ranks were left running";
}

TEST_F(ReliabilityCluster, CtrlCWhileNodesAreBeingReachedEndsMusterAtOnce) {
  cluster_->freeze_sshd(3, true);  // its handshake never finishes
  RunningCommand head(cluster_->muster_argv({"run", "-f", file_, "--", "true"}));
  // Asked once muster is reaching nodes (node1 accepted it), not after a guessed delay: a
  // SIGINT before muster set up its handling would end it without its words.
  for (int waited = 0; cluster_->accepted_connections(0) == 0 && waited < 300; ++waited)
    std::this_thread::sleep_for(milliseconds(100));
  ASSERT_GT(cluster_->accepted_connections(0), 0) << "muster never reached node1";
  const auto asked = Clock::now();
  head.signal(SIGINT);
  auto r = head.wait(std::chrono::seconds(30));
  const auto took = Clock::now() - asked;
  cluster_->freeze_sshd(3, false);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  // "At once" against a handshake that never ends; the bound leaves room for a busy machine.
  EXPECT_LT(took, milliseconds(5000));
  EXPECT_NE(r.err.find("muster: interrupted by SIGINT before anything was started"), std::string::npos)
      << r.err;
}

TEST_F(ReliabilityCluster, CtrlCDuringTheNetworkProbeEndsMusterAtOnce) {
  // 100000 round trips per pair and address: the probe would take minutes.
  RunningCommand head(cluster_->muster_argv({"ping", "-f", file_, "--count", "100000", "--bandwidth"}));
  std::this_thread::sleep_for(milliseconds(3000));
  const auto asked = Clock::now();
  head.signal(SIGINT);
  auto r = head.wait(std::chrono::seconds(30));
  EXPECT_LT(Clock::now() - asked, milliseconds(5000));  // against minutes of probing
  EXPECT_EQ(r.exit_code, 130) << r.err;
}

TEST_F(ReliabilityCluster, ASecondCtrlCKillsRemoteRanksAtOnce) {
  TempDir dir;
  // Ranks that ignore SIGTERM, and a grace period of a minute.
  auto head = std::make_unique<RunningCommand>(cluster_->muster_argv(
      {"run", "-f", file_, "--grace", "60", "--", "sh", "-c",
       "trap '' TERM; echo $$ > " + dir.path() + "/pid.$RANK; while true; do sleep 0.1; done"}));
  if (!wait_until([&] { return rank_pids(dir).size() == 8; }, milliseconds(60000))) {
    head->signal(SIGKILL);
    auto r = head->wait(std::chrono::seconds(10));
    FAIL() << "the ranks did not start: " << rank_pids(dir).size() << " " << r.out << r.err;
  }
  const auto pids = rank_pids(dir);
  head->signal(SIGINT);
  std::this_thread::sleep_for(milliseconds(1500));
  EXPECT_EQ(std::count_if(pids.begin(), pids.end(), process_alive), 8) << "SIGTERM is ignored";
  head->signal(SIGINT);
  EXPECT_TRUE(all_gone_within(pids, milliseconds(5000))) << "the second Ctrl-C did not kill them";
  auto r = head->wait(std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 130) << r.err;
}

// The listening ports of this job's servers on host i that the network reaches: its agent's
// probe server and, on the node of rank 0, the smoke test's rendezvous (MASTER_PORT).
std::vector<std::string> job_ports(const TestCluster& cluster, int i) {
  std::vector<std::string> targets;
  const std::string listening = run_command(cluster.host_argv(i, {"ss", "-ltnpH"})).out;
  for (pid_t pid : cluster.processes_on(i)) {
    const std::string cmdline = process_file(pid, "cmdline");
    if (cmdline.rfind(std::string("muster\0agent", 12), 0) == 0) {
      std::istringstream lines(listening);
      for (std::string line; std::getline(lines, line);)
        if (line.find(fmt::format("pid={},", pid)) != std::string::npos) {
          std::istringstream words(line);
          std::string state, recv, send, local;
          words >> state >> recv >> send >> local;
          // What the network reaches: not the PMIx server's loopback listener (its clients
          // are this node's ranks).
          if (local.rfind("127.", 0) == 0 || local.rfind("[::1]", 0) == 0) continue;
          targets.push_back(cluster.address(i) + ":" + local.substr(local.rfind(':') + 1));
        }
    }
    const std::string environ = process_file(pid, "environ");
    if (cmdline.find(std::string("smoke-rank")) != std::string::npos &&
        environ.find(std::string("\0RANK=0\0", 8)) != std::string::npos) {
      auto value = [&](const std::string& name) {
        auto at = environ.find(std::string(1, '\0') + name + "=");
        return environ.substr(at + name.size() + 2, environ.find('\0', at + 1) - at - name.size() - 2);
      };
      targets.push_back(value("MASTER_ADDR") + ":" + value("MASTER_PORT"));
    }
  }
  return targets;
}

TEST_F(ReliabilityCluster, HostileClientsOnEveryPortOfTheJobCannotDisturbASmokeTest) {
  RunningCommand smoke(cluster_->muster_argv({"smoke", "-f", file_, "--backend", "gloo",
                                              "--max-bytes", "4M", "--iters", "40", "--json"}));
  // Once rank 0 serves the rendezvous, every port of the job is open.
  std::vector<std::string> targets;
  ASSERT_TRUE(wait_until([&] {
    targets.clear();
    for (int i = 0; i < 4; ++i)
      for (auto& t : job_ports(*cluster_, i)) targets.push_back(t);
    return targets.size() == 5;
  }, milliseconds(60000))) << fmt::format("{}", fmt::join(targets, " "));
  std::vector<std::string> attack = {"/usr/bin/python3", source_path("/tests/e2e/hostile_client.py"),
                                     "1000"};
  attack.insert(attack.end(), targets.begin(), targets.end());
  auto hostile = run_command(cluster_->head_argv(attack), {}, std::chrono::seconds(120));
  EXPECT_EQ(hostile.exit_code, 0) << hostile.out << hostile.err;
  auto r = smoke.wait(std::chrono::seconds(300));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["passed"], true);
  for (const auto& row : report["results"]) EXPECT_EQ(row["wrong"], 0) << row.dump();
}

}  // namespace
}  // namespace muster::testing
