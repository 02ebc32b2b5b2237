// The pair search behind a slow collective, over a simulated cluster: slow nodes named in
// three rounds, slow links on the ring named as links, nothing named on a healthy cluster,
// and two slow links that meet at a node never taken for a slow node.
#include "probes/culprit_search.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <set>
#include <string>
#include <tuple>

#include "tests/fakes/simulated_cluster.h"

namespace muster {
namespace {

using testing::SimulatedCluster;

CulpritReport search(SimulatedCluster& cluster, int nodes) {
  return find_culprits(nodes, [&](const auto& pairs) { return cluster.measure(pairs); });
}

size_t pairs_in_first_round(int n) { return size_t(n / 2); }

std::set<int> as_set(const std::vector<int>& v) { return {v.begin(), v.end()}; }
std::set<std::pair<int, int>> as_set(const std::vector<std::pair<int, int>>& v) { return {v.begin(), v.end()}; }

TEST(CulpritSearch, AHealthyClusterNamesNothingInThreeRounds) {
  for (int n : {2, 3, 8, 9}) {
    SimulatedCluster cluster(n, 1);
    CulpritReport r = search(cluster, n);
    EXPECT_TRUE(r.slow_nodes.empty()) << n;
    EXPECT_TRUE(r.slow_links.empty()) << n;
    EXPECT_TRUE(r.unknown.empty()) << n;
    // The ring's two rounds, then nodes two apart (and an odd ring's last pair) in a third.
    EXPECT_LE(r.rounds, n > 2 ? 3 : 1) << n;
  }
}

// Named on a fourth round: slow with its ring partners and with a partner known fast, that
// partner measured in a round of the nodes in doubt alone, not in the crowd of the first three.
TEST(CulpritSearch, OneSlowNodeIsNamedInFourRoundsWhereverItIs) {
  for (int n : {4, 5, 8, 9})
    for (int bad = 0; bad < n; ++bad) {
      SimulatedCluster cluster(n, unsigned(bad));
      cluster.slow_nodes = {bad};
      CulpritReport r = search(cluster, n);
      EXPECT_EQ(as_set(r.slow_nodes), std::set<int>{bad}) << n << " nodes, slow " << bad;
      EXPECT_TRUE(r.slow_links.empty()) << n << " nodes, slow " << bad;
      EXPECT_TRUE(r.unknown.empty()) << n << " nodes, slow " << bad;
      for (const auto& m : r.measured)
        if (m.a == bad || m.b == bad) {
          EXPECT_LE(m.round, 4) << n << " nodes, slow " << bad;
        }
      // An odd ring may take a fifth for its last pair.
      EXPECT_LE(r.rounds, n % 2 ? 5 : 4) << n << " nodes, slow " << bad;
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
  // Node 3 against a good node, each link again (they share node 3), then the one it can
  // verify beside controls.
  EXPECT_LE(r.rounds, 6);
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
  EXPECT_EQ(r.rounds, 4);  // the ring's two, nodes two apart, then the pair again
}

// On shared CPUs one stream of many can run a tenth of its pace while the others stream (64
// test hosts on 2 cores did, in CI): a pair slow whenever other pairs stream beside it is
// measured again in a round of its own before it is called a link, and is no link.
TEST(CulpritSearch, APairSlowOnlyBesideOtherStreamsIsMeasuredAgainAloneAndIsNoLink) {
  for (int n : {8, 16, 64}) {
    SimulatedCluster cluster(n, 13);
    const std::pair<int, int> crowded{2, 3};
    std::vector<size_t> round_sizes_with_it;
    CulpritReport r = find_culprits(n, [&](const auto& pairs) {
      auto out = cluster.measure(pairs);
      for (size_t k = 0; k < pairs.size(); ++k)
        if (std::pair<int, int>(std::minmax(pairs[k].first, pairs[k].second)) == crowded) {
          round_sizes_with_it.push_back(pairs.size());
          if (pairs.size() > 1) out[k] = 0.3;
        }
      return out;
    });
    EXPECT_TRUE(r.slow_nodes.empty()) << n;
    EXPECT_TRUE(r.slow_links.empty()) << n;
    EXPECT_TRUE(r.unknown_links.empty()) << n;
    EXPECT_EQ(round_sizes_with_it, (std::vector<size_t>{pairs_in_first_round(n), 1})) << n;
  }
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
  options.bar.min_gbps = 100;
  CulpritReport r = find_culprits(6, [&](const auto& pairs) { return cluster.measure(pairs); }, options);
  EXPECT_DOUBLE_EQ(r.threshold_gbps, 100);
  // Every node is slow with everyone: each is below the figure, as the mesh judges it too.
  EXPECT_EQ(r.slow_nodes.size(), 6u);
  EXPECT_TRUE(r.unknown.empty());
}

// At 64 and 512 nodes, 1 to 3 slow nodes and 0 to 2 slow ring links at random: every one is
// found, nothing else is named, and the slow nodes are named on
// what four rounds measured.
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
          EXPECT_LE(m.round, 4) << n << " nodes, seed " << seed;
        }
      // Four rounds for the nodes, at most two of links alone (two that share a node cannot
      // stream at once), and one of the links to be named beside controls.
      EXPECT_LE(r.rounds, 7) << n << " nodes, seed " << seed;
    }
}

CulpritReport search(SimulatedCluster& cluster, int nodes, const BandwidthBar& bar) {
  CulpritSearchOptions options;
  options.bar = bar;
  return find_culprits(nodes, [&](const auto& pairs) { return cluster.measure(pairs); }, options);
}

// Exactly the slow nodes named, no link, nothing unknown, no split.
void expect_exactly(const CulpritReport& r, const SimulatedCluster& cluster, const std::string& what) {
  EXPECT_EQ(as_set(r.slow_nodes), cluster.slow_nodes) << what;
  EXPECT_TRUE(r.slow_links.empty()) << what;
  EXPECT_TRUE(r.unknown_links.empty()) << what;
  EXPECT_TRUE(r.unknown.empty()) << what;
  EXPECT_FALSE(r.split) << what;
  EXPECT_EQ(r.cleared + int(cluster.slow_nodes.size()), cluster.size()) << what;
}

// The bar is a fraction of what is typical, so a node at any fraction below it is found:
// a tenth to three tenths under the default half, four to six tenths under 0.75.
TEST(CulpritSearch, ASlowFactorFromATenthToSixTenthsIsFound) {
  for (auto [factors, ratio, noise] : {std::tuple(std::vector<double>{0.1, 0.2, 0.3}, 0.5, 0.2),
                                       std::tuple(std::vector<double>{0.4, 0.5, 0.6}, 0.75, 0.05)})
    for (double factor : factors)
      for (int n : {3, 4, 6, 9, 16, 64}) {
        SimulatedCluster cluster(n, unsigned(n * 10 + factor * 10));
        cluster.noise = noise;
        cluster.slow_gbps = factor * cluster.healthy_gbps;
        cluster.slow_nodes = {n / 3};
        expect_exactly(search(cluster, n, {ratio, std::nullopt}), cluster,
                       fmt::format("{} nodes, slow at {}x, bar {}x", n, factor, ratio));
      }
}

// A quarter, a third and half of the nodes slow, side by side or scattered, at 3 to 4096 nodes.
// The old bar, half the median of the ring's pairs, was the slow figure once a third of the
// nodes were slow (they spoil two ring pairs each), and nothing was found.
TEST(CulpritSearch, UpToHalfTheNodesSlowAreFoundSideBySideOrScattered) {
  for (int n : {3, 4, 6, 8, 9, 16, 17, 64, 512, 4096})
    for (int share : {4, 3, 2})
      for (bool side_by_side : {true, false}) {
        const int slow = n / share;
        if (slow == 0) continue;
        SimulatedCluster cluster(n, unsigned(n + share));
        if (side_by_side) cluster.slow_run(n / 2, slow);
        else cluster.break_at_random(slow, 0, true);
        const CulpritReport r = search(cluster, n);
        expect_exactly(r, cluster, fmt::format("{} nodes, {} slow {}", n, slow, side_by_side ? "side by side" : "scattered"));
        EXPECT_LE(r.rounds, 6) << n;
      }
}

// Every other node slow: every ring pair is a slow node's, and the ring alone looks like a
// healthy, slower cluster. Nodes two apart tell them apart.
TEST(CulpritSearch, EveryOtherNodeSlowIsFoundNotTakenForAHealthyCluster) {
  for (int n : {4, 6, 8, 16, 64}) {
    SimulatedCluster cluster(n, unsigned(n));
    for (int i = 1; i < n; i += 2) cluster.slow_nodes.insert(i);
    expect_exactly(search(cluster, n), cluster, fmt::format("{} nodes", n));
  }
}

// More than half the nodes slow: nothing measured says which group is typical. The search
// says so, names the slower ones as below the others, and fails nobody. (A lone healthy node
// has no healthy partner to show it: two at least.)
TEST(CulpritSearch, MoreThanHalfSlowIsSaidAsSplitNotPassedOrFailed) {
  for (int n : {6, 7, 16, 64}) {
    SimulatedCluster cluster(n, unsigned(n));
    cluster.slow_run(0, n / 2 + 1);
    const CulpritReport r = search(cluster, n);
    EXPECT_TRUE(r.split) << n;
    EXPECT_TRUE(r.slow_nodes.empty()) << n;
    EXPECT_EQ(as_set(r.below_the_fast), cluster.slow_nodes) << n;
    // With the cluster file's figure the bar is absolute: the same nodes fail by name.
    SimulatedCluster again(n, unsigned(n));
    again.slow_run(0, n / 2 + 1);
    const CulpritReport judged = search(again, n, {0.5, 10.0});
    EXPECT_FALSE(judged.split) << n;
    EXPECT_EQ(as_set(judged.slow_nodes), again.slow_nodes) << n;
  }
}

// Healthy clusters whose streams vary by +-30%: nothing named, nothing unknown, at any size.
TEST(CulpritSearch, HealthyClustersWithThirtyPercentNoiseNameNothing) {
  for (int n : {3, 4, 5, 16, 64, 512, 4096})
    for (unsigned seed = 0; seed < 5; ++seed) {
      SimulatedCluster cluster(n, seed);
      cluster.noise = 0.3;
      expect_exactly(search(cluster, n), cluster, fmt::format("{} nodes, seed {}", n, seed));
    }
}

// Streams that share CPUs or uplinks: a pair among many runs at a fraction of its pace alone,
// and now and then stalls to a third. The rounds after the third stream few pairs, several
// times faster; judged into the bar, they raised it under the crowd's pairs, which were then
// "slow once, not measured again" (24 links and 5 nodes unknown on 64 healthy test hosts in
// CI), and a healthy node slowed in the crowd three times running was named slow.
TEST(CulpritSearch, AHealthyClusterWhoseCrowdedStreamsStallNamesNothingAndLeavesNothingUnknown) {
  // Of 1000 runs at this rate, 3 at 64 nodes still name a link or node (227 did, and 516
  // left something unknown, while the bar moved), and 29 at 8 nodes (50): a small cluster's
  // later rounds are crowds of their own, where a pair can stall twice running.
  for (int n : {64, 512})
    for (unsigned seed = 0; seed < 20; ++seed) {
      SimulatedCluster cluster(n, seed);
      cluster.crowd_slowdown = 0.2;
      cluster.stall_chance = 0.3;
      expect_exactly(search(cluster, n), cluster, fmt::format("{} nodes, seed {}", n, seed));
    }
  // A slow node among them is still named, as slow alone as in the crowd.
  for (unsigned seed = 0; seed < 20; ++seed) {
    SimulatedCluster cluster(64, seed);
    cluster.crowd_slowdown = 0.2;
    cluster.stall_chance = 0.3;
    cluster.slow_nodes = {int(seed) * 3};
    expect_exactly(search(cluster, 64), cluster, fmt::format("64 nodes, seed {}", seed));
  }
}

// On three and four nodes the crowded rounds pair a node with every other: a healthy node
// whose streams were all crowded out (a busy 2-core machine, in CI) was named slow on them
// alone. It is asked once more, in a round of the nodes in doubt, and cleared; a slow node
// is named as before.
TEST(CulpritSearch, ANodeSlowWithEveryPartnerOnlyInTheCrowdIsAskedAgainAlone) {
  for (int n : {3, 4})
    for (bool really_slow : {false, true}) {
      SimulatedCluster cluster(n, unsigned(n));
      const int node = 2;
      if (really_slow) cluster.slow_nodes = {node};
      const CulpritReport r = find_culprits(n, [&](const auto& pairs) {
        auto out = cluster.measure(pairs);
        for (size_t k = 0; k < pairs.size(); ++k)
          if (cluster.rounds <= 3 && (pairs[k].first == node || pairs[k].second == node) && out[k])
            *out[k] = std::min(*out[k], 0.3 * cluster.healthy_gbps);  // crowded out
        return out;
      });
      const std::string what = fmt::format("{} nodes, {}", n, really_slow ? "slow" : "healthy");
      EXPECT_EQ(r.slow_nodes, really_slow ? std::vector<int>{node} : std::vector<int>{}) << what;
      EXPECT_TRUE(r.unknown.empty()) << what;
      // Cleared, its pairs of the crowd are links slow once: each measured again alone.
      EXPECT_TRUE(r.slow_links.empty()) << what;
      EXPECT_TRUE(r.unknown_links.empty()) << what;
      if (really_slow) {
        EXPECT_LE(r.rounds, 4) << what;
      }
    }
}

// A load that slows a whole round, the rounds of links included (another job's burst on the
// same CPUs; three healthy links were named slow so in CI): healthy pairs measured beside the
// links as controls slow down too, and the round is judged by them. A slow link is slow
// beside them all the same.
TEST(CulpritSearch, ALinkSlowOnlyWhileTheWholeRoundIsSlowIsNoLink) {
  for (int n : {4, 16, 64})
    for (bool really_slow : {false, true}) {
      SimulatedCluster cluster(n, unsigned(n));
      const std::pair<int, int> link{2, 3};
      if (really_slow) cluster.slow_links = {link};
      const CulpritReport r = find_culprits(n, [&](const auto& pairs) {
        auto out = cluster.measure(pairs);
        for (size_t k = 0; k < pairs.size(); ++k) {
          if (cluster.rounds == 1 && std::pair<int, int>(std::minmax(pairs[k].first, pairs[k].second)) == link)
            *out[k] = std::min(*out[k], 0.3 * cluster.healthy_gbps);  // stalled in the crowd
          if (cluster.rounds >= 4) *out[k] *= 0.4;                    // the burst
        }
        return out;
      });
      const std::string what = fmt::format("{} nodes, the link {}", n, really_slow ? "slow" : "healthy");
      EXPECT_TRUE(r.slow_nodes.empty()) << what;
      EXPECT_TRUE(r.unknown.empty()) << what;
      EXPECT_TRUE(r.unknown_links.empty()) << what;
      const std::set<std::pair<int, int>> expected = really_slow ? std::set{link} : std::set<std::pair<int, int>>{};
      EXPECT_EQ(as_set(r.slow_links), expected) << what;
    }
}

// Slow links anywhere, not only on the ring: never a slow node; a link measured twice is the
// link, and one the search never measured costs nothing.
TEST(CulpritSearch, SlowLinksOffTheRingNeverBlameANode) {
  for (int n : {8, 16, 64})
    for (unsigned seed = 0; seed < 10; ++seed) {
      SimulatedCluster cluster(n, seed);
      cluster.break_at_random(0, 3, /*on_ring=*/false);
      const CulpritReport r = search(cluster, n);
      EXPECT_TRUE(r.slow_nodes.empty()) << n << " nodes, seed " << seed;
      EXPECT_TRUE(r.unknown.empty()) << n << " nodes, seed " << seed;
      for (auto link : r.slow_links) EXPECT_TRUE(cluster.slow_links.count(link)) << n << " nodes, seed " << seed;
      std::set<std::pair<int, int>> measured;
      for (const auto& m : r.measured) measured.insert({std::min(m.a, m.b), std::max(m.a, m.b)});
      for (auto link : cluster.slow_links)
        if (measured.count(link)) {
          EXPECT_TRUE(as_set(r.slow_links).count(link)) << n << " nodes, seed " << seed;
        }
    }
}

// Measured on this 2-core machine: (0,1) streamed while the round's other pair was a capped
// link, so it ran alone at twice what pairs sharing the cores reached. That one fast pair is
// no reason to call the nodes that only shared the cores slow; the capped link is still slow.
TEST(BandwidthJudge, APairThatRanAloneDoesNotMakeTheOthersSlow) {
  const TypicalBandwidth judged =
      judge_bandwidth(4, {{0, 1, 10.37}, {2, 3, 0.02}, {1, 2, 4.37}, {3, 0, 4.64}, {2, 3, 0.02}}, {});
  EXPECT_EQ(judged.fast, (std::vector<bool>{true, true, true, true}));
  EXPECT_DOUBLE_EQ(judged.typical_gbps, 4.37);
  EXPECT_FALSE(judged.split);
}

}  // namespace
}  // namespace muster
