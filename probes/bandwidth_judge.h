// The one judge of slow bandwidth: what is typical, the bar below which a pair is slow, and
// which nodes are known fast. The mesh report (find_slow_bandwidth) and the pair search
// (find_culprits) both decide by it, so ping, doctor and smoke cannot disagree on a rule.
#pragma once

#include <optional>
#include <vector>

namespace muster {

// What a pair's bandwidth must reach: a fraction of the cluster's typical bandwidth, or the
// cluster file's expectation, which wins where it is given.
struct BandwidthBar {
  double min_ratio = 0.5;          // checks.min_bandwidth_ratio
  std::optional<double> min_gbps;  // checks.min_bandwidth_gbps
};

// One measurement of a pair of nodes (either direction, or the slower of both), in Gbit/s.
struct PairFigure {
  int a = 0, b = 0;
  double gbps = 0;
};

struct TypicalBandwidth {
  // The median of the pairs measured between two nodes known fast: a healthy figure whatever
  // share of the pairs the slow nodes spoil. 0 when nothing was measured.
  double typical_gbps = 0;
  double threshold_gbps = 0;  // a pair below it is slow; 0 when nothing can be judged
  // Per node: streamed at or above the bar with some partner. A pair is never faster than its
  // slower end, so one fast pair proves both its nodes fast.
  std::vector<bool> fast;
  int measured_nodes = 0;  // nodes with at least one measurement
  int fast_nodes = 0;
  // More than half the measured nodes are below the bar: either they are slow or the others
  // are unusually fast, and nothing measured tells which (only checks.min_bandwidth_gbps can).
  bool split = false;
  double fastest_of_the_rest_gbps = 0;  // with `split`: the best pair of any node not fast
};

// Judges `pairs` among `nodes` nodes. Without the cluster file's figure, the bar is
// `min_ratio` of the typical figure. A node's best pair is what it can do at least; the fast
// nodes are those whose best is within min_ratio of the (lower) median best among the fast,
// settled from the top down; typical is the median of the pairs among them. Found: fewer than
// half the nodes slow at any factor below min_ratio, and half of them below min_ratio squared
// (a quarter by default), scattered or side by side; past half it says `split`. Fewer than
// three measured nodes cannot tell a slow node from its partner: no bar.
TypicalBandwidth judge_bandwidth(int nodes, const std::vector<PairFigure>& pairs, const BandwidthBar& bar);

}  // namespace muster
