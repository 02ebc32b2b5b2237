// muster ping on the test cluster: unreachable pairs, slow links, duplicate machines,
// interface choice and stopped hosts, each as a user would meet them.
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/build_paths.h"
#include "tests/support/chromium.h"
#include "tests/support/test_cluster.h"

namespace muster::testing {
namespace {

class PingCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    MUSTER_REQUIRE_TEST_CLUSTER();
    cluster_ = std::make_unique<TestCluster>(4);
  }
  nlohmann::json ping_json(const std::vector<std::string>& extra = {}, int* status = nullptr,
                           const std::string& file = "") {
    std::vector<std::string> args = {"ping", "-f", file.empty() ? cluster_->write_cluster_file() : file,
                                     "--json", "--count", "20"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = cluster_->muster(args);
    if (status) *status = r.exit_code;
    EXPECT_FALSE(r.out.empty()) << r.err;
    return r.out.empty() ? nlohmann::json() : nlohmann::json::parse(r.out);
  }
  static bool has_problem(const nlohmann::json& report, const std::string& text) {
    for (const auto& p : report["problems"])
      if (p["message"].get<std::string>().find(text) != std::string::npos) return true;
    return false;
  }
  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(PingCluster, AHealthyClusterPassesWithEveryPairMeasured) {
  int status = -1;
  auto r = ping_json({}, &status);
  EXPECT_EQ(status, 0) << r.dump(2);
  EXPECT_EQ(r["passed"], true);
  ASSERT_EQ(r["pairs"].size(), 12u);  // 4 x 3 ordered pairs, one address each
  for (const auto& p : r["pairs"]) {
    EXPECT_EQ(p["reachable"], true);
    EXPECT_GT(p["rtt_us"]["median"].get<double>(), 0);
    EXPECT_LE(p["rtt_us"]["min"].get<double>(), p["rtt_us"]["median"].get<double>());
    EXPECT_LE(p["rtt_us"]["median"].get<double>(), p["rtt_us"]["p99"].get<double>());
    EXPECT_EQ(p["rtt_us"]["samples"], 20);
  }
  for (int i = 0; i < 4; ++i) {
    const auto& node = r["nodes"][size_t(i)];
    EXPECT_EQ(node["reachable"], true);
    EXPECT_GT(node["steps_ms"]["ssh_handshake_auth"].get<double>(), 0);
    EXPECT_GT(node["steps_ms"]["command_round_trip"].get<double>(), 0);
    EXPECT_EQ(node["facts"]["hostname"], cluster_->host(i));
    EXPECT_LT(std::abs(node["clock_offset_ms"].get<double>()), 1000);  // one machine's clock
    EXPECT_EQ(r["choices"]["nccl_socket_ifname"][cluster_->host(i)], "=eth0");
  }
  EXPECT_EQ(r["choices"]["master_addr"], cluster_->address(0));
}

TEST_F(PingCluster, APairWithoutARouteIsNamedWithBothHostsAndTheAddress) {
  ASSERT_EQ(cluster_->on_host(1, {"ip", "route", "add", "unreachable", cluster_->address(2) + "/32"}).exit_code, 0);
  int status = -1;
  auto r = ping_json({}, &status);
  EXPECT_EQ(status, 1);
  EXPECT_TRUE(has_problem(r, "node2 cannot reach node3 at " + cluster_->address(2) + " (eth0)"))
      << r["problems"].dump(2);
  // node2 cannot answer node3 either: its replies have no route back.
  EXPECT_TRUE(has_problem(r, "node3 cannot reach node2 at " + cluster_->address(1) + " (eth0)"))
      << r["problems"].dump(2);
  int unreachable = 0;
  for (const auto& p : r["pairs"]) unreachable += p["reachable"] == false;
  EXPECT_EQ(unreachable, 2);
}

// What ping said of bandwidth: the failures that name a node or a link.
// Failures only: on this shared 2-core machine (and under a sanitizer) a healthy pair can
// look slow, and the warning that says so ("not yet a failure") is the honest answer; what a
// test must never see is a healthy node or link failed.
std::vector<std::string> bandwidth_problems(const nlohmann::json& report) {
  std::vector<std::string> out;
  for (const auto& p : report["problems"])
    if (p["check"] == "bandwidth" && p["severity"] == "fail")
      out.push_back(p["severity"].get<std::string>() + " " + p["message"].get<std::string>());
  return out;
}

// Every core of this machine busy with a loop of its own, for as long as it lives.
class BusyCpus {
 public:
  BusyCpus() {
    for (long k = 0; k < sysconf(_SC_NPROCESSORS_ONLN); ++k) {
      const pid_t pid = fork();
      if (pid == 0) {
        volatile unsigned long spin = 0;
        for (;;) spin = spin + 1;
      }
      pids_.push_back(pid);
    }
  }
  ~BusyCpus() {
    for (pid_t pid : pids_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }

 private:
  std::vector<pid_t> pids_;
};

TEST_F(PingCluster, AHostCappedBothWaysIsNamedAndNoOtherIs) {
  cluster_->cap_host(3, "30mbit");
  int status = -1;
  auto r = ping_json({"--bandwidth"}, &status);
  EXPECT_EQ(status, 1);
  const auto named = bandwidth_problems(r);
  ASSERT_EQ(named.size(), 1u) << r["problems"].dump(2);
  EXPECT_NE(named[0].find("fail node4: bandwidth to its peers is 0.0"), std::string::npos) << named[0];
  EXPECT_NE(named[0].find("Gbit/s sending and 0.0"), std::string::npos) << named[0];
  EXPECT_NE(named[0].find("Gbit/s receiving (median over 3 peers), below 0.5x the typical "),
            std::string::npos) << named[0];
  for (const auto& p : r["pairs"]) EXPECT_TRUE(p.contains("bandwidth_gbps")) << p.dump();
}

// The page a person looks at, opened in a real browser: a heatmap cell per ordered pair, and
// the capped host's row and column outlined as failing, in both heatmaps. Its screenshot is
// kept under build/tests/artifacts.
TEST_F(PingCluster, TheHtmlPageInChromiumHasACellPerPairAndMarksTheCappedHost) {
  if (const std::string why = chromium_unavailable(); !why.empty()) {
    if (in_ci()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  cluster_->cap_host(3, "30mbit");
  TempDir dir;
  int status = -1;
  ping_json({"--bandwidth", "--html", dir.file("ping.html")}, &status);
  EXPECT_EQ(status, 1);
  const auto dom = chromium_dom(dir.file("ping.html"));
  ASSERT_EQ(dom.exit_code, 0) << dom.err;
  auto count = [&](const std::string& what) { return occurrences(dom.out, what); };
  EXPECT_EQ(count("<rect class=\"cell"), 2u * 4 * 3) << "bandwidth and RTT, 12 ordered pairs each";
  const std::string capped = cluster_->host(3);
  EXPECT_EQ(count("class=\"outline failing\" data-node=\"" + capped + "\""), 4u) << dom.out.substr(0, 4000);
  EXPECT_EQ(count(">" + capped + "</text>"), 4u);
  EXPECT_EQ(count("<text class=\"label failing row\""), 2u) << "only the capped host's row";
  std::filesystem::create_directories(artifact_path("/"));
  const std::string png = artifact_path("/ping-one-capped-host.png");
  const auto shot = chromium_screenshot(dir.file("ping.html"), png);
  EXPECT_EQ(shot.exit_code, 0) << shot.err;
  EXPECT_GT(std::filesystem::file_size(png), 10000u);
}

TEST_F(PingCluster, AHostCappedSendingOnlyIsNamedForThatWay) {
  ASSERT_EQ(cluster_->on_host(3, {"tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate",
                                  "20mbit", "burst", "32kbit", "latency", "50ms"}).exit_code, 0);
  const auto r = ping_json({"--bandwidth"});
  const auto named = bandwidth_problems(r);
  ASSERT_EQ(named.size(), 1u) << r["problems"].dump(2);
  EXPECT_NE(named[0].find("Gbit/s sending (median over 3 peers; "), std::string::npos) << named[0];
  EXPECT_NE(named[0].find("Gbit/s receiving is fine)"), std::string::npos) << named[0];
}

TEST_F(PingCluster, ALinkCappedBetweenTwoHostsIsTheLinkNotEitherHost) {
  cluster_->cap_link(1, 2, "30mbit");
  int status = -1;
  auto r = ping_json({"--bandwidth"}, &status);
  EXPECT_EQ(status, 1);
  const auto named = bandwidth_problems(r);
  ASSERT_EQ(named.size(), 1u) << r["problems"].dump(2);
  EXPECT_EQ(named[0].find("fail the link node2 <-> node3 is slow: 0.0"), 0u) << named[0];
  EXPECT_NE(named[0].find("both nodes are fast with their other peers"), std::string::npos) << named[0];
  // Each direction was measured again on its own before it was called a failure.
  int alone = 0;
  for (const auto& p : r["pairs"]) alone += p.contains("bandwidth_alone_gbps");
  EXPECT_GE(alone, 2);
}

// Every host capped alike: no node is slow against the others, yet every stream is a
// three-hundredth of what the kernel says eth0 trained to (a veth's 10 Gbit/s): each is named.
TEST_F(PingCluster, EveryHostCappedAlikeIsNamedAgainstItsLineRate) {
  for (int i = 0; i < 4; ++i) cluster_->cap_host(i, "30mbit");
  int status = -1;
  auto r = ping_json({"--bandwidth"}, &status);
  EXPECT_EQ(status, 1);
  const auto named = bandwidth_problems(r);
  ASSERT_EQ(named.size(), 4u) << r["problems"].dump(2);
  for (const auto& text : named)
    EXPECT_NE(text.find("below 0.01x the line rate of the links (its eth0 runs at 10 Gbit/s)"), std::string::npos)
        << text;
}

TEST_F(PingCluster, AHealthyClusterUnderABusyCpuNamesNoSlowNodeOrLink) {
  BusyCpus busy;
  auto r = ping_json({"--bandwidth"});
  EXPECT_TRUE(bandwidth_problems(r).empty()) << r["problems"].dump(2);
}

// The pair search finds the capped host in four rounds of disjoint pairs streaming both ways,
// and a capped link between ring neighbours as the link: what doctor runs past 16 nodes.
TEST_F(PingCluster, TheSearchNamesACappedHostInFourRounds) {
  cluster_->cap_host(2, "30mbit");
  int status = -1;
  auto r = ping_json({"--search"}, &status);
  EXPECT_EQ(status, 1);
  const auto named = bandwidth_problems(r);
  ASSERT_EQ(named.size(), 1u) << r["problems"].dump(2);
  EXPECT_EQ(named[0].find("fail node3: bandwidth is slow with every partner (0.0"), 0u) << named[0];
  EXPECT_LE(r["search"]["rounds"].get<int>(), 4) << r["search"].dump(2);
}

// Two hosts of six capped (a third of the cluster): the search's old bar, half the median of
// the ring pairs, was the capped figure, and it said "no problems found". The mesh and the
// search both name exactly the two, by the one judge.
TEST_F(PingCluster, TwoCappedHostsOfSixAreNamedByTheSearchAndByTheMesh) {
  cluster_.reset();
  cluster_ = std::make_unique<TestCluster>(6);
  cluster_->cap_host(1, "30mbit");
  cluster_->cap_host(4, "30mbit");
  for (const char* how : {"--search", "--bandwidth"}) {
    int status = -1;
    auto r = ping_json({how}, &status);
    EXPECT_EQ(status, 1) << how;
    const auto named = bandwidth_problems(r);
    ASSERT_EQ(named.size(), 2u) << how << r["problems"].dump(2);
    EXPECT_EQ(named[0].find("fail node2: "), 0u) << how << named[0];
    EXPECT_EQ(named[1].find("fail node5: "), 0u) << how << named[1];
  }
}

// The first host capped: MASTER_ADDR goes on the second, and says whom it passed over.
TEST_F(PingCluster, MasterAddrAvoidsTheHostThatFailed) {
  cluster_->cap_host(0, "30mbit");
  int status = -1;
  auto r = ping_json({"--bandwidth"}, &status);
  EXPECT_EQ(status, 1);
  EXPECT_EQ(r["choices"]["master_addr"], cluster_->address(1)) << r["choices"].dump(2);
  EXPECT_EQ(r["choices"]["master_passed_over"], "node1") << r["choices"].dump(2);
}

TEST_F(PingCluster, TheSearchNamesACappedLinkBetweenRingNeighboursAsTheLink) {
  cluster_->cap_link(2, 3, "30mbit");
  auto r = ping_json({"--search"});
  const auto named = bandwidth_problems(r);
  ASSERT_EQ(named.size(), 1u) << r["problems"].dump(2);
  EXPECT_EQ(named[0].find("fail the link node3 <-> node4 is slow: 0.0"), 0u) << named[0];
}

TEST_F(PingCluster, TheSearchNamesNothingOnAHealthyClusterUnderABusyCpu) {
  BusyCpus busy;
  int status = -1;
  auto r = ping_json({"--search"}, &status);
  EXPECT_EQ(status, 0) << r["problems"].dump(2);
  EXPECT_TRUE(bandwidth_problems(r).empty()) << r["problems"].dump(2);
  // Three rounds for the nodes (the ring's two, then the nodes two apart), then the rounds
  // of links in which a pair that looked slow under the load is measured again alone: four
  // nodes' six links fit three (measured in CI: a pair at 0.68 Gbit/s in the third round,
  // 3.44 alone in the fourth).
  EXPECT_LE(r["search"]["rounds"].get<int>(), 6) << r["search"].dump(2);
}

// muster smoke --pairs runs the same search over real ranks (one per host, Gloo), each pair
// an all-reduce within its round's budget: the capped host is named, and only it.
nlohmann::json smoke_pairs_json(TestCluster& cluster, int* status) {
  auto r = cluster.muster({"smoke", "-f", cluster.write_cluster_file(), "--pairs", "--min-bytes", "1M",
                           "--max-bytes", "1M", "--iters", "2", "--warmup", "0", "--json"}, 300);
  *status = r.exit_code;
  EXPECT_FALSE(r.out.empty()) << r.err;
  return r.out.empty() ? nlohmann::json() : nlohmann::json::parse(r.out);
}

TEST_F(PingCluster, TheSmokePairSearchNamesACappedHostAndNoOther) {
  cluster_->cap_host(3, "30mbit");
  int status = -1;
  auto r = smoke_pairs_json(*cluster_, &status);
  EXPECT_EQ(status, 1) << r.dump(2);
  EXPECT_EQ(r["pair_search"]["slow_nodes"], nlohmann::json::array({"node4"})) << r["pair_search"].dump(2);
  EXPECT_TRUE(r["pair_search"]["slow_links"].empty()) << r["pair_search"].dump(2);
  EXPECT_LE(r["pair_search"]["rounds"].get<int>(), 4) << r["pair_search"].dump(2);
  EXPECT_TRUE(has_problem(r, "node4: all_reduce with each of its partners runs at 0.0")) << r["problems"].dump(2);
  for (const auto& p : r["problems"])
    for (const char* other : {"node1", "node2", "node3"})
      EXPECT_EQ(p["message"].get<std::string>().find(other), std::string::npos) << p.dump();
  // No row names a "slowest rank": in a ring every rank waits on node4's link.
  for (const auto& row : r["results"]) EXPECT_FALSE(row.contains("slowest_rank")) << row.dump();
}

// Without --pairs, an all-reduce below checks.min_busbw_gbps is followed by the search.
TEST_F(PingCluster, ASmokeBelowTheExpectedBusbwSearchesThePairsByItself) {
  cluster_->cap_host(3, "30mbit");
  auto r = cluster_->muster({"smoke", "-f", cluster_->write_cluster_file("checks:\n  min_busbw_gbps: 1\n"),
                             "--min-bytes", "1M", "--max-bytes", "1M", "--iters", "2", "--warmup", "0", "--json"},
                            300);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["pair_search"]["slow_nodes"], nlohmann::json::array({"node4"})) << report.dump(2);
  EXPECT_TRUE(has_problem(report, "is below checks.min_busbw_gbps 1")) << report["problems"].dump(2);
}

// Four hosts of six capped: more than half the nodes below the other two, and nothing
// measured says which half is typical. smoke --pairs said nothing at all and "all checks
// passed"; it now warns, naming the four, and fails neither half.
TEST_F(PingCluster, FourCappedHostsOfSixAreASplitThatSmokeWarnsOfAndDoesNotPass) {
  cluster_.reset();
  cluster_ = std::make_unique<TestCluster>(6);
  for (int host : {2, 3, 4, 5}) cluster_->cap_host(host, "30mbit");
  const std::string file = cluster_->write_cluster_file();
  const std::vector<std::string> args = {"smoke", "-f", file, "--pairs", "--min-bytes", "1M", "--max-bytes", "1M",
                                         "--iters", "2", "--warmup", "0"};
  auto text = cluster_->muster(args, 300);
  EXPECT_EQ(text.exit_code, 0) << text.out << text.err;
  EXPECT_NE(text.err.find("the pair search found bandwidth split: 4 of the nodes (node3, node4, node5, node6)"),
            std::string::npos) << text.err;
  EXPECT_NE(text.out.find("no check failed; 1 warning above says what could not be told"), std::string::npos)
      << text.out;
  EXPECT_EQ(text.out.find("all checks passed"), std::string::npos) << text.out;
}

TEST_F(PingCluster, TheSmokePairSearchNamesACappedLinkAsTheLink) {
  cluster_->cap_link(2, 3, "30mbit");
  int status = -1;
  auto r = smoke_pairs_json(*cluster_, &status);
  EXPECT_EQ(status, 1) << r.dump(2);
  EXPECT_TRUE(r["pair_search"]["slow_nodes"].empty()) << r["pair_search"].dump(2);
  EXPECT_EQ(r["pair_search"]["slow_links"], nlohmann::json::parse(R"([["node3", "node4"]])"))
      << r["pair_search"].dump(2);
  EXPECT_TRUE(has_problem(r, "the link node3 <-> node4 is slow: all_reduce between them runs at 0.0"))
      << r["problems"].dump(2);
}

TEST_F(PingCluster, TheSmokePairSearchNamesNothingOnAHealthyClusterUnderABusyCpu) {
  BusyCpus busy;
  int status = -1;
  auto r = smoke_pairs_json(*cluster_, &status);
  EXPECT_EQ(status, 0) << r.dump(2);
  EXPECT_TRUE(r["pair_search"]["slow_nodes"].empty()) << r["pair_search"].dump(2);
  EXPECT_TRUE(r["pair_search"]["slow_links"].empty()) << r["pair_search"].dump(2);
}

TEST_F(PingCluster, TwoEntriesForOneMachineAreCaught) {
  const std::string alias = cluster_->address(0).substr(0, cluster_->address(0).rfind('.')) + ".101";
  ASSERT_EQ(cluster_->on_host(0, {"ip", "addr", "add", alias + "/24", "dev", "eth0"}).exit_code, 0);
  std::string file = cluster_->write_cluster_file("  - host: node1-again\n    address: " + alias + "\n",
                                                  "accept-new");
  int status = -1;
  auto r = ping_json({}, &status, file);
  EXPECT_EQ(status, 1);
  EXPECT_TRUE(has_problem(r, "node1 (" + cluster_->address(0) + ") and node1-again (" + alias +
                             ") are the same machine (same /etc/machine-id"))
      << r["problems"].dump(2);
  // muster run refuses to start such a job.
  auto run = cluster_->muster({"run", "-f", file, "--", "true"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("are the same machine"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("nothing was started"), std::string::npos) << run.err;
}

TEST_F(PingCluster, OnlyTheNetworkThatJoinsEveryHostIsChosen) {
  cluster_->add_second_network();
  // eth0 no longer joins everyone: node2 cannot reach node3 there. eth1 does.
  ASSERT_EQ(cluster_->on_host(1, {"ip", "route", "add", "unreachable", cluster_->address(2) + "/32"}).exit_code, 0);
  auto r = ping_json();
  EXPECT_EQ(r["choices"]["master_addr"], cluster_->second_address(0)) << r["choices"].dump(2);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(r["choices"]["nccl_socket_ifname"][cluster_->host(i)], "=eth1");
  auto run = cluster_->muster({"run", "-f", cluster_->write_cluster_file(), "--", "sh", "-c",
                               "echo $MASTER_ADDR $NCCL_SOCKET_IFNAME $GLOO_SOCKET_IFNAME"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (int i = 0; i < 4; ++i)
    EXPECT_NE(run.out.find(fmt::format("[{}] {} =eth1 eth1", i, cluster_->second_address(0))),
              std::string::npos) << run.out;
  // The cluster file's launch.env still wins over the measured choice.
  auto pinned = cluster_->muster({"run", "-f", cluster_->write_cluster_file(
                                      "launch:\n  env:\n    NCCL_SOCKET_IFNAME: =eth0\n"),
                                  "--", "sh", "-c", "echo $NCCL_SOCKET_IFNAME"});
  EXPECT_NE(pinned.out.find("[0] =eth0"), std::string::npos) << pinned.out << pinned.err;
}

TEST_F(PingCluster, AStoppedHostFailsOnlyItself) {
  cluster_->stop_sshd(3);
  int status = -1;
  auto r = ping_json({}, &status);
  EXPECT_EQ(status, 255);  // a node that cannot be reached, as for exec, run and smoke
  EXPECT_EQ(r["nodes"][3]["reachable"], false);
  EXPECT_NE(r["nodes"][3]["error"].get<std::string>().find("node4: connection refused"),
            std::string::npos);
  EXPECT_EQ(r["pairs"].size(), 6u);  // the other three measured each other
  for (const auto& p : r["pairs"]) EXPECT_EQ(p["reachable"], true);
}

// Two nodes: their one pair cannot tell which end is slow. Measured but not judged is said as
// a warning, by ping --bandwidth and by doctor, never passed.
TEST_F(PingCluster, TwoNodesBandwidthIsMeasuredNotJudgedAndSaysSo) {
  std::string yaml;
  {
    std::ifstream in(cluster_->write_cluster_file());
    yaml.assign(std::istreambuf_iterator<char>(in), {});
  }
  yaml.resize(yaml.find("  - host: " + cluster_->host(2) + "\n"));
  const std::string two = cluster_->dir() + "/two-nodes.yaml";
  std::ofstream(two) << yaml;
  int status = -1;
  auto r = ping_json({"--bandwidth"}, &status, two);
  EXPECT_EQ(status, 0) << r.dump(2);
  EXPECT_TRUE(has_problem(r, "bandwidth not judged: 2 nodes measured")) << r["problems"].dump(2);

  auto doctor = cluster_->muster({"doctor", "-f", two, "--skip", "health,launch,smoke", "--json"});
  EXPECT_EQ(doctor.exit_code, 0) << doctor.out << doctor.err;
  bool warned = false;
  const auto report = nlohmann::json::parse(doctor.out);
  for (const auto& c : report["checks"])
    if (c["stage"] == "network" && c["name"] == "bandwidth")
      warned |= c["status"] == "warn" && c["reason"].get<std::string>().find("not judged") != std::string::npos;
  EXPECT_TRUE(warned) << doctor.out;
}

TEST_F(PingCluster, ThresholdsFromTheClusterFileBecomeFailures) {
  int status = -1;
  auto r = ping_json({}, &status, cluster_->write_cluster_file("checks:\n  max_rtt_ms: 0.000001\n"));
  EXPECT_EQ(status, 1);
  EXPECT_TRUE(has_problem(r, "is above checks.max_rtt_ms")) << r["problems"].dump(2);
}

}  // namespace
}  // namespace muster::testing
