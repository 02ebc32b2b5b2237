// The pair search behind a slow collective, over a simulated cluster: slow nodes named in
// three rounds, slow links on the ring named as links, nothing named on a healthy cluster,
// and two slow links that meet at a node never taken for a slow node.
#include "probes/culprit_search.h"

#include <gtest/gtest.h>

#include <set>

#include "tests/fakes/simulated_cluster.h"

namespace muster {
namespace {

using testing::SimulatedCluster;

CulpritReport search(SimulatedCluster& cluster, int nodes) {
  return find_culprits(nodes, [&](const auto& pairs) { return cluster.measure(pairs); });
}

std::set<int> as_set(const std::vector<int>& v) { return {v.begin(), v.end()}; }
std::set<std::pair<int, int>> as_set(const std::vector<std::pair<int, int>>& v) { return {v.begin(), v.end()}; }

TEST(CulpritSearch, AHealthyClusterNamesNothingInTwoRounds) {
  for (int n : {2, 3, 8, 9}) {
    SimulatedCluster cluster(n, 1);
    CulpritReport r = search(cluster, n);
    EXPECT_TRUE(r.slow_nodes.empty()) << n;
    EXPECT_TRUE(r.slow_links.empty()) << n;
    EXPECT_TRUE(r.unknown.empty()) << n;
    EXPECT_LE(r.rounds, n % 2 ? 3 : 2) << n;  // an odd ring's last pair needs a round of its own
  }
}

TEST(CulpritSearch, OneSlowNodeIsNamedInThreeRoundsWhereverItIs) {
  for (int n : {4, 5, 8, 9})
    for (int bad = 0; bad < n; ++bad) {
      SimulatedCluster cluster(n, unsigned(bad));
      cluster.slow_nodes = {bad};
      CulpritReport r = search(cluster, n);
      EXPECT_EQ(as_set(r.slow_nodes), std::set<int>{bad}) << n << " nodes, slow " << bad;
      EXPECT_TRUE(r.slow_links.empty()) << n << " nodes, slow " << bad;
      EXPECT_TRUE(r.unknown.empty()) << n << " nodes, slow " << bad;
      // Named on what rounds 1 to 3 measured; an odd ring may take a fourth for its last pair.
      for (const auto& m : r.measured)
        if (m.a == bad || m.b == bad) {
          EXPECT_LE(m.round, 3) << n << " nodes, slow " << bad;
        }
      EXPECT_LE(r.rounds, n % 2 ? 4 : 3) << n << " nodes, slow " << bad;
      EXPECT_TRUE(r.unknown_links.empty()) << n << " nodes, slow " << bad;
    }
}

TEST(CulpritSearch, ASlowLinkOnTheRingIsTheLinkNotEitherNode) {
  for (int n : {8, 9}) {
    SimulatedCluster cluster(n, 7);
    cluster.slow_links = {{2, 3}, {0, n - 1}};  // the last one closes the ring
    CulpritReport r = search(cluster, n);
    EXPECT_TRUE(r.slow_nodes.empty()) << n;
    EXPECT_EQ(as_set(r.slow_links), (std::set<std::pair<int, int>>{{0, n - 1}, {2, 3}})) << n;
  }
}

// Both of node 3's ring pairs are slow links: a node slow on two pairs is asked once more,
// with a node known good, before it is called slow.
TEST(CulpritSearch, TwoSlowLinksMeetingAtANodeAreNotASlowNode) {
  SimulatedCluster cluster(8, 3);
  cluster.slow_links = {{2, 3}, {3, 4}};
  CulpritReport r = search(cluster, 8);
  EXPECT_TRUE(r.slow_nodes.empty());
  EXPECT_EQ(as_set(r.slow_links), (std::set<std::pair<int, int>>{{2, 3}, {3, 4}}));
  EXPECT_LE(r.rounds, 5);  // node 3 against a good node, then each link again (they share node 3)
}

// A pair slow once, beside every other pair's stream, and fast when measured again is no link.
TEST(CulpritSearch, APairSlowOnceAndFastAgainIsNotALink) {
  SimulatedCluster cluster(8, 11);
  int calls = 0;
  CulpritReport r = find_culprits(8, [&](const auto& pairs) {
    auto out = cluster.measure(pairs);
    if (calls++ == 0) out[1] = 0.3;  // (2,3) in the first round only
    return out;
  });
  EXPECT_TRUE(r.slow_nodes.empty());
  EXPECT_TRUE(r.slow_links.empty());
  EXPECT_TRUE(r.unknown_links.empty());
  EXPECT_EQ(r.rounds, 3);
}

// A node that never answers is unknown, not slow, and asked once more, not every round; its
// partners are not blamed.
TEST(CulpritSearch, ANodeThatNeverAnswersIsUnknownNotSlowAndItsPartnersAreNotBlamed) {
  SimulatedCluster cluster(8, 5);
  cluster.lost_nodes = {5};
  CulpritReport r = search(cluster, 8);
  EXPECT_TRUE(r.slow_nodes.empty());
  EXPECT_TRUE(r.slow_links.empty());
  EXPECT_EQ(r.unknown, std::vector<int>{5});
  EXPECT_EQ(r.rounds, 3);
}

TEST(CulpritSearch, TheClusterFilesExpectationIsTheBar) {
  SimulatedCluster cluster(6, 2);  // 12 to 18 Gbit/s everywhere
  CulpritSearchOptions options;
  options.min_gbps = 100;
  CulpritReport r = find_culprits(6, [&](const auto& pairs) { return cluster.measure(pairs); }, options);
  EXPECT_DOUBLE_EQ(r.threshold_gbps, 100);
  // Every node is slow with everyone: nobody is known good, so nothing can be told apart.
  EXPECT_TRUE(r.slow_nodes.empty());
  EXPECT_EQ(r.unknown.size(), 6u);
}

// At 64 and 512 nodes, 1 to 3 slow nodes and 0 to 2 slow ring links at random: every one is
// found, nothing else is named, and the slow nodes are named on
// what three rounds measured.
TEST(CulpritSearch, RandomFaultsAtScaleAreFoundWithoutFalsePositives) {
  for (int n : {64, 65, 512})
    for (unsigned seed = 0; seed < 30; ++seed) {
      SimulatedCluster cluster(n, seed);
      cluster.break_at_random(1 + int(seed % 3), int(seed % 3), /*on_ring=*/true);
      CulpritReport r = search(cluster, n);
      EXPECT_EQ(as_set(r.slow_nodes), cluster.slow_nodes) << n << " nodes, seed " << seed;
      EXPECT_EQ(as_set(r.slow_links), cluster.slow_links) << n << " nodes, seed " << seed;
      EXPECT_TRUE(r.unknown.empty()) << n << " nodes, seed " << seed;
      for (const auto& m : r.measured)
        if (cluster.slow_nodes.count(m.a) || cluster.slow_nodes.count(m.b)) {
          EXPECT_LE(m.round, 3) << n << " nodes, seed " << seed;
        }
      EXPECT_LE(r.rounds, 5) << n << " nodes, seed " << seed;
    }
}

}  // namespace
}  // namespace muster
