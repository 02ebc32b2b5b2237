// Which node or link makes a collective slow, found by pairs as an operator bisects by hand,
// but in a few rounds: every node is measured with its two ring neighbours (the links a ring
// collective crosses), in disjoint pairs at once; a node slow with both is measured once more
// with a node known to be good. The measurements come through a seam, so the same search runs
// over real ranks and over a simulated cluster of thousands.
#pragma once

#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "probes/bandwidth_judge.h"

namespace muster {

// One round: disjoint pairs of nodes measured at once; the bandwidth of each (the slower of
// its two directions, in Gbit/s), in the order given. A pair not measured (its node lost, its
// budget spent) is unset: it says nothing, neither slow nor fast.
using MeasurePairs =
    std::function<std::vector<std::optional<double>>(const std::vector<std::pair<int, int>>& pairs)>;

struct CulpritSearchOptions {
  BandwidthBar bar;    // judged as judge_bandwidth does, after every round
  int max_rounds = 6;  // rounds after which what is unresolved stays unknown
};

struct MeasuredPair {
  int a = 0, b = 0;
  double gbps = 0;
  int round = 0;  // from 1
};

struct CulpritReport {
  std::vector<int> slow_nodes;                  // slow with every partner, a good one among them
  std::vector<std::pair<int, int>> slow_links;  // slow only between these two (a < b), twice
  std::vector<std::pair<int, int>> unknown_links;  // slow once, not measured again in the link rounds
  std::vector<int> unknown;  // seen slow or never measured, not resolved within max_rounds
  double typical_gbps = 0;                      // judge_bandwidth's, over every pair measured
  double threshold_gbps = 0;                    // a pair below it is slow
  // Every node not named or unknown streamed at or above the bar with a partner: a pair is
  // never faster than its slower end, so that partner was fast too.
  int cleared = 0;
  // More than half the nodes below the bar (judge_bandwidth's `split`): nothing is named;
  // these are the nodes below it.
  bool split = false;
  std::vector<int> below_the_fast;
  int rounds = 0;                               // rounds measured
  std::vector<MeasuredPair> measured;           // every pair, in order
};

// Searches `nodes` nodes (at least 2). Rounds 1 and 2 measure the ring's pairs (0,1) (2,3) ...
// then (1,2) (3,4) ...; round 3 measures each node not yet fast with a partner known fast, and
// the idle nodes two apart on the ring, (0,2) (1,3) (4,6) ..., so that slow nodes side by side
// with healthy ones (every other node slow) cannot make every pair look alike; later rounds
// confirm what is left, the nodes in doubt alone. The bar is set by the first three rounds,
// when every node streams at once, and does not move after (a pair alone runs faster than one
// in the crowd). With an odd count the ring's last pair (n-1, 0) comes once both its nodes are
// known fast. A node is named slow when it is slow with two partners or more and one of them
// was chosen because it was known fast, in a round after the third (even when slow with all):
// two slow links that meet at a node look like a slow node on two pairs, and a healthy node
// can be slowed in the crowd. A pair slow twice (measured again in a round of links only,
// after the nodes are settled), and slow a third time beside pairs of healthy nodes as
// controls where there are nodes to spare (a load on the whole round slows the controls too,
// and lowers that round's bar), between two nodes fast with others is the link. Node faults
// need four rounds, links up to five more; links are found on the pairs measured (the
// network stage measures the whole mesh).
CulpritReport find_culprits(int nodes, const MeasurePairs& measure, const CulpritSearchOptions& options = {});

}  // namespace muster
