// Benchmark (not a test): the pair search that names the node or link behind a slow
// collective, over simulated clusters of 64, 512 and 4096 nodes, each trial with 1 to 3 slow
// nodes and 0 to 2 slow links at random anywhere in the mesh. Prints, per size: the slow nodes
// found, the false positives (nodes and links named that are healthy: must be 0), the rounds
// used, the slow links found among those on the ring (the links a ring collective crosses;
// a link off the ring does not slow it and is the network stage's to find), and the wall time
// at a budget per round, beside the peers an operator has: the whole mesh as disjoint pairs
// (n-1 rounds, both ways at once) and bisecting by hand (two collective runs per halving).
// Usage: build/tests/bench/culprit_search_bench [TRIALS] [SECONDS_PER_ROUND]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "probes/culprit_search.h"
#include "tests/fakes/simulated_cluster.h"

using namespace muster;

int main(int argc, char** argv) {
  const int trials = argc > 1 ? std::max(1, std::atoi(argv[1])) : 200;
  const double per_round_s = argc > 2 ? std::max(0.1, std::atof(argv[2])) : 2.0;
  fmt::print("{} trials per size, {:.1f} s per round (a pair's time-bounded stream and its setup)\n",
             trials, per_round_s);
  fmt::print("{:>6} {:>13} {:>8} {:>12} {:>17} {:>10} {:>9} {:>9} {:>9} {:>8}\n", "nodes", "slow nodes",
             "false +", "rounds max", "ring links found", "off-ring", "search s", "mesh s", "bisect s",
             "mesh/x");
  const auto run = [&](int n, bool links_on_ring) {
    int nodes_present = 0, nodes_found = 0, false_positives = 0, max_rounds = 0, total_rounds = 0;
    int max_rounds_node_faults_only = 0, ring_links = 0, ring_links_found = 0, off_ring = 0;
    for (int t = 0; t < trials; ++t) {
      testing::SimulatedCluster cluster(n, unsigned(n * 1000 + t));
      cluster.break_at_random(1 + t % 3, (t / 3) % 3, links_on_ring);
      CulpritReport r = find_culprits(n, [&](const auto& pairs) { return cluster.measure(pairs); });
      nodes_present += int(cluster.slow_nodes.size());
      for (int node : r.slow_nodes) (cluster.slow_nodes.count(node) ? nodes_found : false_positives)++;
      for (auto link : r.slow_links) false_positives += !cluster.slow_links.count(link);
      for (auto link : cluster.slow_links) {
        const bool ring = cluster.on_ring(link);
        ring_links += ring;
        off_ring += !ring;
        ring_links_found += ring && std::count(r.slow_links.begin(), r.slow_links.end(), link);
      }
      max_rounds = std::max(max_rounds, r.rounds);
      total_rounds += r.rounds;
      if (cluster.slow_links.empty()) max_rounds_node_faults_only = std::max(max_rounds_node_faults_only, r.rounds);
    }
    const double search_s = double(total_rounds) / trials * per_round_s;
    const double mesh_s = double(n - 1) * per_round_s;
    // By hand: run the collective on each half, keep the slow half, until one node is left.
    const double bisect_s = 2 * std::ceil(std::log2(double(n))) * per_round_s;
    fmt::print("{:>6} {:>6}/{:<6} {:>8} {:>5} ({:>4}) {:>10}/{:<6} {:>10} {:>9.1f} {:>9.0f} {:>9.1f} {:>7.0f}x\n", n,
               nodes_found, nodes_present, false_positives, max_rounds, max_rounds_node_faults_only,
               ring_links_found, ring_links, off_ring, search_s, mesh_s, bisect_s, mesh_s / search_s);
  };
  fmt::print("slow links anywhere in the mesh:\n");
  for (int n : {64, 512, 4096}) run(n, false);
  fmt::print("slow links on the ring (each one slows a ring collective):\n");
  for (int n : {64, 512, 4096}) run(n, true);
  fmt::print("rounds max: all trials (trials with slow nodes only); search s: the mean;\n"
             "mesh/x: the whole mesh's time over the search's.\n");
}
