// Choosing MASTER_ADDR and the interfaces from recorded probes: the subnet that joins every
// node, the preferred address first, and "every other node reached it" counted by node.
#include "probes/network_report.h"

#include <gtest/gtest.h>

namespace muster {
namespace {

PairProbe probe(int src, int dst, const std::string& address, bool reachable = true) {
  PairProbe p;
  p.src = src;
  p.dst = dst;
  p.address = address;
  p.result.reachable = reachable;
  return p;
}

// Three nodes, each on 10.0.0.0/24 (eth0) and 10.9.0.0/24 (ib0).
std::vector<std::vector<LocalAddress>> three_nodes() {
  std::vector<std::vector<LocalAddress>> out;
  for (int i = 0; i < 3; ++i)
    out.push_back({{"ib0", "10.9.0." + std::to_string(i + 1), 24}, {"eth0", "10.0.0." + std::to_string(i + 1), 24}});
  return out;
}

std::vector<PairProbe> all_pairs(const std::string& prefix) {
  std::vector<PairProbe> out;
  for (int s = 0; s < 3; ++s)
    for (int d = 0; d < 3; ++d)
      if (s != d) out.push_back(probe(s, d, prefix + std::to_string(d + 1)));
  return out;
}

TEST(ChooseNetwork, ThePreferredSubnetWinsWhenItJoinsEveryNode) {
  auto probes = all_pairs("10.0.0.");
  auto ib = all_pairs("10.9.0.");
  probes.insert(probes.end(), ib.begin(), ib.end());
  NetworkChoice c = choose_network(three_nodes(), probes, "10.0.0.1");
  EXPECT_EQ(c.master_addr, "10.0.0.1");
  EXPECT_EQ(c.subnet, "10.0.0.0/24");
  EXPECT_EQ(c.interface_of, (std::map<int, std::string>{{0, "eth0"}, {1, "eth0"}, {2, "eth0"}}));
}

TEST(ChooseNetwork, ASubnetOneNodeCannotBeReachedOnIsPassedOver) {
  auto probes = all_pairs("10.9.0.");
  for (auto& p : probes)
    if (p.src == 2 && p.dst == 1) p.result.reachable = false;
  auto eth = all_pairs("10.0.0.");
  probes.insert(probes.end(), eth.begin(), eth.end());
  NetworkChoice c = choose_network(three_nodes(), probes, "10.9.0.1");
  EXPECT_EQ(c.subnet, "10.0.0.0/24");
  EXPECT_EQ(c.master_addr, "10.0.0.1");
}

// Node 1 is reached twice by node 0 and, for certain, not by node 2: the two probes from
// one source do not outweigh the failure from another.
TEST(ChooseNetwork, ReachedByAllCountsNodesNotProbes) {
  auto probes = all_pairs("10.0.0.");
  for (auto& p : probes)
    if (p.src == 2 && p.dst == 1) p.result.reachable = false;
  probes.push_back(probe(0, 1, "10.0.0.2"));
  NetworkChoice c = choose_network(three_nodes(), probes, "10.0.0.1");
  EXPECT_EQ(c.subnet, "");
  EXPECT_EQ(c.master_addr, "10.0.0.1");  // routing still gets everyone to node 0
  EXPECT_TRUE(c.interface_of.empty());
}

TEST(ChooseNetwork, NoAddressOfNodeZeroReachedByAllIsNoChoice) {
  std::vector<PairProbe> probes;
  for (const auto& p : all_pairs("10.0.0."))
    if (p.dst != 0) probes.push_back(p);
  EXPECT_FALSE(choose_network(three_nodes(), probes, "10.0.0.1").master_addr);
}

// Each node with node 0, both ways, on both subnets: what a launch's quick pass probes.
std::vector<PairProbe> with_node_zero() {
  std::vector<PairProbe> out;
  for (const auto& round : rendezvous_rounds(3))
    for (auto [src, dst] : round)
      for (const std::string prefix : {"10.0.0.", "10.9.0."})
        out.push_back(probe(src, dst, prefix + std::to_string(dst + 1)));
  return out;
}

TEST(RendezvousRounds, EveryNodeToNodeZeroThenNodeZeroToEveryNode) {
  EXPECT_EQ(rendezvous_rounds(4), (std::vector<std::vector<std::pair<int, int>>>{
                                      {{1, 0}, {2, 0}, {3, 0}}, {{0, 1}, {0, 2}, {0, 3}}}));
  EXPECT_TRUE(rendezvous_rounds(1).empty());
}

TEST(ChooseNetwork, PairsWithNodeZeroAreEnoughForALaunch) {
  const auto probes = with_node_zero();
  NetworkChoice c = choose_network(three_nodes(), probes, "10.0.0.1", PairSchedule::WithRendezvous);
  EXPECT_EQ(c.master_addr, "10.0.0.1");
  EXPECT_EQ(c.subnet, "10.0.0.0/24");
  EXPECT_EQ(c.interface_of, (std::map<int, std::string>{{0, "eth0"}, {1, "eth0"}, {2, "eth0"}}));
  // Read as the whole mesh, the pairs not measured (1 and 2 with each other) take nothing
  // away: a subnet is ruled out by a failure, never by a missing measurement.
  EXPECT_EQ(choose_network(three_nodes(), probes, "10.0.0.1").subnet, "10.0.0.0/24");
}

TEST(ChooseNetwork, AStarvedMeasurementRulesNothingOutAndAConfirmedFailureDoes) {
  auto probes = all_pairs("10.0.0.");
  auto ib = all_pairs("10.9.0.");
  probes.insert(probes.end(), ib.begin(), ib.end());
  for (auto& p : probes)
    if (p.src == 1 && p.dst == 2 && p.address == "10.0.0.3") {
      p.result.reachable = false;
      p.result.starved = "some task waited for a CPU 80% of the 2.0 s";
    }
  EXPECT_EQ(choose_network(three_nodes(), probes, "10.0.0.1").subnet, "10.0.0.0/24");
  for (auto& p : probes) p.result.starved.clear();
  EXPECT_EQ(choose_network(three_nodes(), probes, "10.0.0.1").subnet, "10.9.0.0/24");
}

TEST(ChooseNetwork, WithNodeZeroANodeItCannotReachOnASubnetRulesThatSubnetOut) {
  auto probes = with_node_zero();
  for (auto& p : probes)
    if (p.src == 0 && p.dst == 2 && p.address == "10.0.0.3") p.result.reachable = false;
  NetworkChoice c = choose_network(three_nodes(), probes, "10.0.0.1", PairSchedule::WithRendezvous);
  EXPECT_EQ(c.subnet, "10.9.0.0/24");
  EXPECT_EQ(c.master_addr, "10.9.0.1");
}

TEST(ChooseNetwork, WithNodeZeroMasterAddrStillNeedsEveryOtherNode) {
  auto probes = with_node_zero();
  for (auto& p : probes)
    if (p.src == 2 && p.dst == 0) p.result.reachable = false;  // node 2 reaches none of node 0's
  EXPECT_FALSE(choose_network(three_nodes(), probes, "10.0.0.1", PairSchedule::WithRendezvous).master_addr);
}

}  // namespace
}  // namespace muster
