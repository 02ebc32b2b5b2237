// A simulated cluster for the culprit search: each pair's bandwidth is what its slower end or
// the link between them allows, with noise, and every round is checked to be disjoint pairs.
#pragma once

#include <algorithm>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

namespace muster::testing {

class SimulatedCluster {
 public:
  SimulatedCluster(int nodes, unsigned seed) : nodes_(nodes), random_(seed) {}

  std::set<int> slow_nodes;                  // streams at slow_gbps with anyone
  std::set<std::pair<int, int>> slow_links;  // (a < b): slow between these two only
  std::set<int> lost_nodes;                  // never answer: their pairs are unmeasured
  double healthy_gbps = 15, slow_gbps = 0.5;
  double noise = 0.2;  // each measurement within +-noise of its figure
  // Streams that share CPUs or uplinks (64 test hosts on 2 cores: 0.33 Gbit/s for a pair among
  // 32, 2.53 alone): each other pair of the round slows a pair by this share, and with every
  // node streaming a pair stalls to 0.3-0.6 of its pace this likely (less in smaller rounds).
  double crowd_slowdown = 0;
  double stall_chance = 0;

  // One round, as the search's measuring seam: each pair the slower end, with noise.
  std::vector<std::optional<double>> measure(const std::vector<std::pair<int, int>>& pairs) {
    ++rounds;
    std::set<int> seen;
    std::vector<std::optional<double>> out;
    for (auto [a, b] : pairs) {
      if (a == b || a < 0 || b < 0 || a >= nodes_ || b >= nodes_ || !seen.insert(a).second || !seen.insert(b).second)
        throw std::logic_error("a round must be disjoint pairs of distinct nodes");
      if (lost_nodes.count(a) || lost_nodes.count(b)) {
        out.emplace_back();
        continue;
      }
      const bool slow = slow_nodes.count(a) || slow_nodes.count(b) ||
                        slow_links.count({std::min(a, b), std::max(a, b)});
      double gbps = (slow ? slow_gbps : healthy_gbps) * std::uniform_real_distribution<double>(1 - noise, 1 + noise)(random_);
      gbps /= 1 + crowd_slowdown * double(pairs.size() - 1);
      const double crowd = std::min(1.0, double(pairs.size()) / double(std::max(nodes_ / 2, 1)));
      if (std::uniform_real_distribution<double>(0, 1)(random_) < stall_chance * crowd)
        gbps *= std::uniform_real_distribution<double>(0.3, 0.6)(random_);
      out.push_back(gbps);
    }
    return out;
  }

  // Picks `nodes` slow nodes and `links` slow links at random, the links away from the slow
  // nodes; with `on_ring`, only between ring neighbours (the links a ring collective crosses).
  void break_at_random(int nodes, int links, bool on_ring) {
    while (int(slow_nodes.size()) < nodes) slow_nodes.insert(pick());
    while (int(slow_links.size()) < links) {
      const int a = pick(), b = on_ring ? (a + 1) % nodes_ : pick();
      if (a == b || slow_nodes.count(a) || slow_nodes.count(b)) continue;
      slow_links.insert({std::min(a, b), std::max(a, b)});
    }
  }

  // `count` slow nodes side by side from `first`, around the ring.
  void slow_run(int first, int count) {
    for (int k = 0; k < count; ++k) slow_nodes.insert((first + k) % nodes_);
  }

  // Whether the link is between ring neighbours.
  bool on_ring(std::pair<int, int> link) const {
    return link.second - link.first == 1 || (link.first == 0 && link.second == nodes_ - 1);
  }

  int rounds = 0;
  int size() const { return nodes_; }

 private:
  int pick() { return std::uniform_int_distribution<int>(0, nodes_ - 1)(random_); }
  int nodes_;
  std::mt19937 random_;
};

}  // namespace muster::testing
