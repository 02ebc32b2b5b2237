// The network pass over scripted agents: a pair that fails once and answers on a retry is a
// warning, not an unreachable address; a pair that fails every attempt is named as that pair,
// and neither keeps the launch from its MASTER_ADDR.
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/job/cluster_ping.h"
#include "launcher/job/doctor.h"
#include "tests/fakes/fake_agent_transport.h"

namespace muster {
namespace {

using std::chrono::milliseconds;

class ClusterPingTest : public ::testing::Test {
 protected:
  // Nodes n1..nN at a1..aN over SSH, each with one address 10.0.0.i/24 on eth0.
  ClusterSpec cluster(int nodes) {
    ClusterSpec c;
    c.source = "test";
    for (int i = 1; i <= nodes; ++i) {
      transport_->nodes[fmt::format("a{}", i)].addresses = {{"eth0", fmt::format("10.0.0.{}", i), 24}};
      c.nodes.push_back(NodeSpec{fmt::format("n{}", i), fmt::format("a{}", i), {1}, {}, {}, {}});
    }
    return c;
  }
  testing::FakeAgentNode& node(int i) { return transport_->nodes.at(fmt::format("a{}", i)); }
  PingReport ping(const ClusterSpec& c, PairSchedule pairs, PingOptions options = {}) {
    SessionOptions session_options;
    session_options.heartbeat_timeout = milliseconds(5000);
    auto session = ClusterSession::open(transport_, c, session_options, {});
    options.pairs = pairs;
    return ping_cluster(*session, c, options, {});
  }
  PingReport ping_bandwidth(const ClusterSpec& c, int remeasure_limit = PingOptions{}.remeasure_limit) {
    PingOptions options;
    options.bandwidth = true;
    options.bulk = milliseconds(10);
    options.remeasure_limit = remeasure_limit;
    return ping(c, PairSchedule::Every, options);
  }
  static std::vector<std::string> messages(const PingReport& r, Finding::Severity severity) {
    std::vector<std::string> out;
    for (const auto& f : r.problems)
      if (f.severity == severity) out.push_back(f.message);
    return out;
  }

  std::shared_ptr<testing::FakeAgentTransport> transport_ = std::make_shared<testing::FakeAgentTransport>();
};

TEST_F(ClusterPingTest, APairThatAnswersOnItsRetryIsAWarningNotUnreachable) {
  ClusterSpec c = cluster(4);
  node(3).reaches = [](const std::string& address, int attempt) { return address != "10.0.0.4" || attempt > 1; };
  PingReport r = ping(c, PairSchedule::Every);
  EXPECT_TRUE(messages(r, Finding::Severity::Fail).empty()) << fmt::format("{}", fmt::join(messages(r, Finding::Severity::Fail), "\n"));
  EXPECT_EQ(messages(r, Finding::Severity::Warn),
            std::vector<std::string>{"n3 reached n4 at 10.0.0.4 (eth0) only on attempt 2; the first failed: "
                                     "no answer within 2000 ms"});
  EXPECT_EQ(r.pairs.size(), 12u);  // every ordered pair once, on its one address
  EXPECT_EQ(r.choice.master_addr, "10.0.0.1");
  EXPECT_EQ(r.choice.subnet, "10.0.0.0/24");
}

TEST_F(ClusterPingTest, APairThatFailsEveryAttemptIsNamedAsThatPair) {
  ClusterSpec c = cluster(4);
  node(3).reaches = [](const std::string& address, int) { return address != "10.0.0.4"; };
  PingReport r = ping(c, PairSchedule::Every);
  EXPECT_EQ(messages(r, Finding::Severity::Fail),
            std::vector<std::string>{"n3 cannot reach n4 at 10.0.0.4 (eth0): no answer within 2000 ms, "
                                     "on each of 2 attempts"});
  EXPECT_EQ(r.choice.master_addr, "10.0.0.1");
  EXPECT_TRUE(r.blocking_problems().empty());
}

TEST_F(ClusterPingTest, ALaunchKeepsItsMasterAddrWhenARendezvousPairFailsOnce) {
  ClusterSpec c = cluster(5);
  node(4).reaches = [](const std::string& address, int attempt) { return address != "10.0.0.1" || attempt > 1; };
  PingReport r = ping(c, PairSchedule::WithRendezvous);
  EXPECT_TRUE(r.blocking_problems().empty());
  EXPECT_EQ(r.choice.master_addr, "10.0.0.1");
  EXPECT_EQ(r.pairs.size(), 8u);  // each node with node 0, both ways
}

TEST_F(ClusterPingTest, WithoutACommonSubnetANameThatDoesNotResolveIsSaidBeforeAnyRankStarts) {
  ClusterSpec c = cluster(3);
  node(2).addresses = {{"eth0", "10.1.0.2", 24}};  // routed, but in a subnet of its own
  node(2).name_resolves = false;
  node(3).name_resolves = std::nullopt;             // the resolver did not answer in time
  PingReport r = ping(c, PairSchedule::Every);
  EXPECT_EQ(r.choice.master_addr, "10.0.0.1");
  EXPECT_EQ(r.choice.subnet, "");
  EXPECT_EQ(messages(r, Finding::Severity::Warn),
            (std::vector<std::string>{
                "no single subnet joins every node: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME are "
                "left to the frameworks",
                "n2: its name fake does not resolve there to an address off loopback, and Gloo and NCCL "
                "would fall back to it: set GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME in the cluster file's launch.env"}));
}

// A node lost in the middle of the pairs is reported as lost, once; its peers are not blamed
// for failing to reach it, and the others are measured to the end.
TEST_F(ClusterPingTest, ANodeLostWhileThePairsAreMeasuredIsNamedAsLostNotThroughItsPeers) {
  ClusterSpec c = cluster(5);
  node(4).dies_at_probe = 2;
  PingReport r = ping(c, PairSchedule::Every);
  EXPECT_FALSE(r.nodes[3].reach.ok);
  EXPECT_NE(r.nodes[3].reach.failure.find("lost contact with n4"), std::string::npos) << r.nodes[3].reach.failure;
  const auto fails = messages(r, Finding::Severity::Fail);
  ASSERT_EQ(fails.size(), 1u) << fmt::format("{}", fmt::join(fails, "\n"));
  EXPECT_NE(fails[0].find("lost contact with n4"), std::string::npos) << fails[0];
  // Every pair of the four others, measured and reached.
  size_t among_others = 0;
  for (const auto& p : r.pairs)
    if (p.src != 3 && p.dst != 3) {
      EXPECT_TRUE(p.result.reachable) << p.src << "->" << p.dst;
      ++among_others;
    }
  EXPECT_EQ(among_others, 12u);
  EXPECT_EQ(r.choice.master_addr, "10.0.0.1");
  EXPECT_EQ(r.choice.subnet, "10.0.0.0/24");
}

// A failure measured while the prober had no CPU to spare gets a third attempt and is then
// "unknown": a warning, never "cannot reach", and it takes no subnet away.
// Both ends short of CPU: the silence is explained, unknown rather than unreachable.
TEST_F(ClusterPingTest, AStarvedFailureIsUnknownNotUnreachable) {
  ClusterSpec c = cluster(4);
  node(3).reaches = [](const std::string& address, int) { return address != "10.0.0.4"; };
  node(3).starved = [](const std::string&, int) { return "some task waited for a CPU 80% of the 2.0 s"; };
  node(4).cpu_pressure = 0.7;
  PingReport r = ping(c, PairSchedule::Every);
  EXPECT_TRUE(messages(r, Finding::Severity::Fail).empty()) << fmt::format("{}", fmt::join(messages(r, Finding::Severity::Fail), "\n"));
  EXPECT_EQ(messages(r, Finding::Severity::Warn),
            std::vector<std::string>{"n3 -> n4 at 10.0.0.4 (eth0) is unknown, not measured: no answer within "
                                     "2000 ms on attempt 3, and on n3 some task waited for a CPU 80% of the 2.0 s; "
                                     "and on n4 some task waited for a CPU 70% of the last 10 s"});
  EXPECT_EQ(r.choice.subnet, "10.0.0.0/24");
}

// The prober busy and the target idle: a busy prober does not explain why an idle target never
// answered. Before, this was "unknown" and exit 0.
TEST_F(ClusterPingTest, AStarvedProberWithAnIdleTargetIsAFailureSaidWithBoth) {
  ClusterSpec c = cluster(4);
  node(3).reaches = [](const std::string& address, int) { return address != "10.0.0.4"; };
  node(3).starved = [](const std::string&, int) { return "some task waited for a CPU 80% of the 2.0 s"; };
  node(4).cpu_pressure = 0.05;
  PingReport r = ping(c, PairSchedule::Every);
  EXPECT_EQ(messages(r, Finding::Severity::Fail),
            std::vector<std::string>{"n3 cannot reach n4 at 10.0.0.4 (eth0): no answer within 2000 ms; its prober "
                                     "was short of CPU (some task waited for a CPU 80% of the 2.0 s), but n4 was not "
                                     "(5% of the last 10 s), so that does not explain it, on each of 3 attempts"});
  EXPECT_TRUE(r.failed());
}

// A target short of CPU in a burst around the probe (80% of the time, by its stall counter),
// though its 10 s average is low: both ends explain the silence, unknown.
TEST_F(ClusterPingTest, ATargetShortOfCpuAroundTheProbeExcusesItThoughItsTenSecondAverageIsLow) {
  ClusterSpec c = cluster(4);
  node(3).reaches = [](const std::string& address, int) { return address != "10.0.0.4"; };
  node(3).starved = [](const std::string&, int) { return "some task waited for a CPU 80% of the 2.0 s"; };
  node(4).cpu_pressure = 0.05;
  const auto start = std::chrono::steady_clock::now();
  node(4).cpu_stalled_us = [start]() -> std::optional<std::uint64_t> {
    return std::uint64_t(0.8 * double(std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::steady_clock::now() - start).count()));
  };
  PingReport r = ping(c, PairSchedule::Every);
  EXPECT_TRUE(messages(r, Finding::Severity::Fail).empty()) << fmt::format("{}", fmt::join(messages(r, Finding::Severity::Fail), "\n"));
  const auto warnings = messages(r, Finding::Severity::Warn);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("and on n4 some task waited for a CPU "), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(" s around the probe"), std::string::npos) << warnings[0];
}

// Packets dropped on a node are a finding about that node, with its count: never an excuse.
TEST_F(ClusterPingTest, DroppedPacketsAreAWarningAboutTheNode) {
  ClusterSpec c = cluster(3);
  node(2).dropped_per_probe = 7;
  PingReport r = ping(c, PairSchedule::Every);
  const auto warnings = messages(r, Finding::Severity::Warn);
  ASSERT_EQ(warnings.size(), 1u) << fmt::format("{}", fmt::join(warnings, "\n"));
  EXPECT_EQ(warnings[0].find("n2: its kernel dropped 14 packets it had no time to process"), 0u) << warnings[0];
}

TEST_F(ClusterPingTest, ANodeWhoseNeighbourTableIsSmallerThanTheClusterIsNamed) {
  ClusterSpec c = cluster(4);
  node(2).neighbour_limit = 2;             // fewer than its 3 peers
  node(3).neighbour_limit = 3;             // just enough
  node(4).neighbour_limit = std::nullopt;  // not known: nothing claimed
  PingReport r = ping(c, PairSchedule::Every);
  EXPECT_EQ(messages(r, Finding::Severity::Warn),
            std::vector<std::string>{
                "n2: its kernel holds at most 2 neighbours (net.ipv4.neigh.default.gc_thresh3), fewer than "
                "its 3 peers: ranks that talk to every peer will find some with \"No route to host\"; raise "
                "gc_thresh3 and gc_thresh2 above 3"});
  EXPECT_FALSE(r.failed());
}

// A node whose every stream is slow, both ways, fails by name with its numbers beside the
// cluster's; its peers are not named, though half the pairs of four nodes are its.
TEST_F(ClusterPingTest, ANodeSlowBothWaysFailsByNameAndItsPeersDoNot) {
  ClusterSpec c = cluster(4);
  node(4).gbps = [](const std::string&, int) { return 0.03; };
  for (int i = 1; i <= 3; ++i)
    node(i).gbps = [](const std::string& address, int) { return address == "10.0.0.4" ? 0.03 : 15.0; };
  PingReport r = ping_bandwidth(c);
  EXPECT_EQ(messages(r, Finding::Severity::Fail),
            std::vector<std::string>{"n4: bandwidth to its peers is 0.03 Gbit/s sending and 0.03 Gbit/s receiving "
                                     "(median over 3 peers), below 0.5x the typical 15.00 Gbit/s between fast nodes "
                                     "(checks.min_bandwidth_ratio)"});
  EXPECT_TRUE(messages(r, Finding::Severity::Warn).empty()) << fmt::format("{}", fmt::join(messages(r, Finding::Severity::Warn), "\n"));
}

// The first node capped: MASTER_ADDR (where every rank connects first) moves to the next
// node, which failed nothing, and says whom it passed over. Before, it stayed on n1.
TEST_F(ClusterPingTest, MasterAddrIsNotPutOnTheNodeThatFailed) {
  ClusterSpec c = cluster(3);
  node(1).gbps = [](const std::string&, int) { return 0.03; };
  for (int i = 2; i <= 3; ++i)
    node(i).gbps = [](const std::string& address, int) { return address == "10.0.0.1" ? 0.03 : 15.0; };
  PingReport r = ping_bandwidth(c);
  ASSERT_EQ(messages(r, Finding::Severity::Fail).size(), 1u);
  EXPECT_EQ(r.rendezvous_node, 1);
  EXPECT_EQ(r.choice.master_addr, "10.0.0.2");
  EXPECT_EQ(r.rendezvous_passed_over, 0);
  EXPECT_FALSE(r.rendezvous_on_failed_node);
}

// A stream that looked slow beside the others and is fast alone names nothing; one still slow
// alone fails as the link between its two ends.
TEST_F(ClusterPingTest, ASlowPairIsMeasuredAgainAloneBeforeItsLinkFails) {
  ClusterSpec c = cluster(4);
  node(1).gbps = [](const std::string& address, int attempt) { return address == "10.0.0.2" && attempt == 1 ? 1.0 : 12.0; };
  node(3).gbps = [](const std::string& address, int) { return address == "10.0.0.4" ? 0.5 : 12.0; };
  node(4).gbps = [](const std::string& address, int) { return address == "10.0.0.3" ? 0.5 : 12.0; };
  PingReport r = ping_bandwidth(c);
  EXPECT_EQ(messages(r, Finding::Severity::Fail),
            std::vector<std::string>{"the link n3 <-> n4 is slow: 0.50 Gbit/s n3 -> n4 and 0.50 Gbit/s n4 -> n3, "
                                     "below 0.5x the typical 12.00 Gbit/s between fast nodes (checks.min_bandwidth_ratio); "
                                     "both nodes are fast with their other peers"});
  EXPECT_TRUE(messages(r, Finding::Severity::Warn).empty()) << fmt::format("{}", fmt::join(messages(r, Finding::Severity::Warn), "\n"));
  for (const auto& p : r.pairs) {
    if (p.src == 0 && p.dst == 1) {
      EXPECT_EQ(p.gbps_alone, 12.0);
    }
    if (p.src == 2 && p.dst == 3) {
      EXPECT_EQ(p.control_gbps, 12.0);  // n3's and n4's fast peers, alone
    }
  }
}

// A link still slow alone, whose sender was as slow to its fastest peer right beside it, is no
// failure: on a machine busy with something else every stream slows (a healthy 4-node cluster
// on 2 shared cores once failed "the link node2 <-> node3" at half the cluster median).
TEST_F(ClusterPingTest, ASlowLinkWhoseSenderWasSlowToItsFastPeerTooIsAWarning) {
  ClusterSpec c = cluster(4);
  node(3).gbps = [](const std::string& address, int attempt) {
    return address == "10.0.0.4" || attempt > 1 ? 0.5 : 12.0;
  };
  PingReport r = ping_bandwidth(c);
  EXPECT_TRUE(messages(r, Finding::Severity::Fail).empty()) << fmt::format("{}", fmt::join(messages(r, Finding::Severity::Fail), "\n"));
  const auto warnings = messages(r, Finding::Severity::Warn);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("the link n3 <-> n4 is slow: 0.50 Gbit/s n3 -> n4, "), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("n3 -> n4 ran at 0.50 Gbit/s and n3 -> n"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("its ends were slow with their fast peers too"), std::string::npos) << warnings[0];
}

// A node whose interface trained below the others' is named by its line rate (a warning: a
// rate is a driver's word), however alike
// the streams are (9 Gbit/s, a tenth of 100, is no fault of a single stream); and where every
// node is alike, streams below a hundredth of their links' line rate name every node: the
// median of a uniformly slow cluster cannot.
TEST_F(ClusterPingTest, ALinkThatTrainedDownIsNamedByItsLineRate) {
  ClusterSpec c = cluster(4);
  for (int i = 1; i <= 4; ++i) node(i).addresses.front().line_rate_gbps = i == 4 ? 10.0 : 100.0;
  for (int i = 1; i <= 4; ++i) node(i).gbps = [](const std::string&, int) { return 9.0; };
  PingReport r = ping_bandwidth(c);
  EXPECT_TRUE(messages(r, Finding::Severity::Fail).empty());
  EXPECT_EQ(messages(r, Finding::Severity::Warn),
            std::vector<std::string>{"n4: eth0 links at 10 Gbit/s, below 0.5x the nodes' median line rate of "
                                     "100 Gbit/s: every stream through it is capped there (a link that "
                                     "trained down: check its cable, port and switch)"});
}

TEST_F(ClusterPingTest, StreamsFarBelowTheLineRateOnEveryNodeNameEveryNode) {
  ClusterSpec c = cluster(4);
  for (int i = 1; i <= 4; ++i) {
    node(i).addresses.front().line_rate_gbps = 25.0;
    node(i).gbps = [](const std::string&, int) { return 0.03; };
  }
  PingReport r = ping_bandwidth(c);
  const auto fails = messages(r, Finding::Severity::Fail);
  ASSERT_EQ(fails.size(), 4u) << fmt::format("{}", fmt::join(fails, "\n"));
  EXPECT_EQ(fails[0], "n1: bandwidth to its peers is 0.03 Gbit/s sending (median over 3 peers) and 0.03 Gbit/s "
                      "receiving (median over 3 peers), below 0.01x the line rate of the links (its eth0 runs at "
                      "25 Gbit/s)");
  // The cluster file's expectation replaces the line rate's: 0.03 Gbit/s is what it asks.
  c.checks.min_bandwidth_gbps = 0.01;
  EXPECT_TRUE(messages(ping_bandwidth(c), Finding::Severity::Fail).empty());
}

// As much for a receiver busy with something else: its stream from a fast peer, measured
// beside the link's, was as slow.
TEST_F(ClusterPingTest, ASlowLinkWhoseReceiverWasSlowFromItsFastPeerTooIsAWarning) {
  ClusterSpec c = cluster(4);
  for (int i : {1, 2})
    node(i).gbps = [](const std::string& address, int attempt) { return address == "10.0.0.4" && attempt > 1 ? 0.5 : 12.0; };
  node(3).gbps = [](const std::string& address, int) { return address == "10.0.0.4" ? 0.5 : 12.0; };
  PingReport r = ping_bandwidth(c);
  EXPECT_TRUE(messages(r, Finding::Severity::Fail).empty()) << fmt::format("{}", fmt::join(messages(r, Finding::Severity::Fail), "\n"));
  const auto warnings = messages(r, Finding::Severity::Warn);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("-> n4 at 0.50 Gbit/s: its ends were slow with their fast peers too"), std::string::npos)
      << warnings[0];
}

// Past the limit of pairs measured again, a slow link is a warning that says how to confirm
// it, not a failure measured once beside other streams.
TEST_F(ClusterPingTest, ASlowLinkNotMeasuredAgainIsAWarning) {
  ClusterSpec c = cluster(4);
  node(3).gbps = [](const std::string& address, int) { return address == "10.0.0.4" ? 0.5 : 12.0; };
  PingReport r = ping_bandwidth(c, /*remeasure_limit=*/0);
  EXPECT_TRUE(messages(r, Finding::Severity::Fail).empty());
  const auto warnings = messages(r, Finding::Severity::Warn);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("the link n3 <-> n4 is slow: 0.50 Gbit/s n3 -> n4, "), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("not yet a failure"), std::string::npos) << warnings[0];
}

struct QuietDoctor : DoctorObserver {
  void begin_stage(const std::string&, int, const std::string&) override {}
  void step_done() override {}
  void end_stage(const std::string&, CheckStatus, const std::string&) override {}
};

// A node the ssh stage reached and the network stage lost fails that stage by name: what could
// not be checked on it is no pass, whatever the other nodes did (16 of 32 nodes lost once
// passed doctor with warnings, its launch run on the other 16).
TEST(DoctorOverFakeAgents, ANodeLostAfterTheSshStageFailsTheStageThatLostIt) {
  auto transport = std::make_shared<testing::FakeAgentTransport>();
  for (int i = 1; i <= 3; ++i)
    transport->nodes[fmt::format("a{}", i)].addresses = {{"eth0", fmt::format("10.0.0.{}", i), 24}};
  transport->nodes["a3"].dies_at_probe = 1;
  DoctorRequest request;
  request.cluster.hosts = "a1,a2,a3";
  request.only = {"ssh", "network", "launch"};
  request.transport = transport;
  QuietDoctor quiet;
  const DoctorReport report = run_doctor(request, quiet);
  std::vector<std::string> failed;
  for (const auto& c : report.checks)
    if (c.status == CheckStatus::Fail) failed.push_back(fmt::format("{} {} {}: {}", c.stage, c.name, c.node.value_or("-"), c.reason));
  ASSERT_EQ(failed.size(), 1u) << fmt::format("{}", fmt::join(failed, "\n"));
  EXPECT_EQ(failed[0].rfind("network lost a3: lost contact with a3", 0), 0u) << failed[0];
  EXPECT_EQ(report.overall(), CheckStatus::Fail);
}

// A node whose health checks hang (its agent alive, heartbeating, but never answering) fails
// the health stage by name, as muster health fails a hung check: it is not a warning.
TEST(DoctorOverFakeAgents, ANodeWhoseHealthChecksHangFailsTheHealthStage) {
  auto transport = std::make_shared<testing::FakeAgentTransport>();
  for (int i = 1; i <= 2; ++i)
    transport->nodes[fmt::format("a{}", i)].addresses = {{"eth0", fmt::format("10.0.0.{}", i), 24}};
  transport->nodes["a2"].health_hangs = true;
  DoctorRequest request;
  request.cluster.hosts = "a1,a2";
  request.only = {"ssh", "health"};
  request.transport = transport;
  request.health_limit = std::chrono::milliseconds(500);
  QuietDoctor quiet;
  const DoctorReport report = run_doctor(request, quiet);
  const Check* hung = nullptr;
  for (const auto& c : report.checks)
    if (c.stage == "health" && c.node == "a2" && c.name == "node") hung = &c;
  ASSERT_NE(hung, nullptr);
  EXPECT_EQ(hung->status, CheckStatus::Fail);
  EXPECT_NE(hung->reason.find("no answer within 0.5 s: a check hung on the node"), std::string::npos) << hung->reason;
  EXPECT_EQ(report.overall(), CheckStatus::Fail);
}

}  // namespace
}  // namespace muster
