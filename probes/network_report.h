// Making sense of node-to-node probes: the schedule that keeps measurements from
// disturbing each other, the interface every node can use, and the outliers.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "probes/bandwidth_judge.h"
#include "probes/interfaces.h"
#include "probes/tcp_probe.h"

namespace muster {

// Which pairs of nodes a network pass probes.
enum class PairSchedule {
  Every,           // every ordered pair, the whole mesh: n(n-1) probes (ping, doctor)
  WithRendezvous,  // each node with node 0, both ways: 2(n-1) probes (what a launch needs)
};

// Ordered pairs (src, dst) of n nodes in rounds, each node in at most one pair per round
// (a round-robin tournament, each match played both ways), so a measurement never shares
// a node with another.
std::vector<std::vector<std::pair<int, int>>> tournament_rounds(int n);

// Ordered pairs between node 0 and each other node, in two rounds: every node to node 0,
// then node 0 to every node. What a launch needs to trust MASTER_ADDR on node 0 and each
// node's interface; the mesh between the other nodes is ping's and doctor's to check.
std::vector<std::vector<std::pair<int, int>>> rendezvous_rounds(int n);

// One probe of one address of dst from src.
struct PairProbe {
  int src = 0, dst = 0;
  std::string address, interface;
  ProbeResult result;   // of the last attempt on this address
  int attempts = 1;     // how many times the address was probed
  double asked_s = 0, answered_s = 0;  // the last attempt, in seconds of the pass (the head's clock)
  std::string first_error;  // why an earlier attempt failed, when one did
  // Bandwidth measured again with no other stream in flight, where the first measurement,
  // taken beside other pairs' streams, looked slow.
  std::optional<double> gbps_alone;
  // For a slow link's pair: the slower of its sender's stream to its fastest other peer and
  // its receiver's from its fastest other peer, each measured alone just before the pair's
  // second stream alone. What the ends could do at that moment: on shared or busy CPUs every
  // stream slows, and a link is slow only beside this.
  std::optional<double> control_gbps;
  int control_src = -1, control_dst = -1;
  // The pair's bandwidth: the better of its measurements, if it has one.
  std::optional<double> best_gbps() const {
    if (!result.gbps || !gbps_alone) return result.gbps ? result.gbps : gbps_alone;
    return std::max(*result.gbps, *gbps_alone);
  }
};

// What muster will use for rendezvous and collectives.
struct NetworkChoice {
  std::optional<std::string> master_addr;      // an address of node 0 every node reached
  std::string subnet;                          // the subnet that connects everyone, if any
  std::map<int, std::string> interface_of;     // node -> interface name in that subnet
};

// Picks a subnet in which every node has an address the probes show reachable (from every
// other node; with WithRendezvous from node 0), preferring the one holding
// `preferred_address` (where the head reached node 0), and the MASTER_ADDR in it, which
// every other node reached. Never a loopback address.
NetworkChoice choose_network(const std::vector<std::vector<LocalAddress>>& addresses_of_node,
                             const std::vector<PairProbe>& probes,
                             const std::string& preferred_address,
                             PairSchedule schedule = PairSchedule::Every);

// A node whose links are far off the cluster's typical ones.
struct Outlier {
  int node = 0;
  double ratio = 0;  // node's figure / cluster median
};

// Nodes whose median RTT to their peers is at least `factor` times the cluster median.
std::vector<Outlier> rtt_outliers(int nodes, const std::vector<PairProbe>& probes, double factor);
// Bandwidth of one ordered pair of nodes, src sending to dst.
struct PairBandwidth {
  int src = 0, dst = 0;
  double gbps = 0;
};

// A node whose own links are slow: most of its pairs in a direction are below the bar.
struct SlowNode {
  int node = 0;
  bool sending = false, receiving = false;  // which directions are slow
  double sending_gbps = 0, receiving_gbps = 0;  // the node's median in each direction
  int peers = 0;                            // how many peers it was measured with
};

// A link below the bar between two nodes that are fast with their other peers: the cable,
// the switch port or a route, not either node.
struct SlowLink {
  int a = 0, b = 0;                         // a < b
  std::optional<double> a_to_b_gbps, b_to_a_gbps;  // set for the slow directions
};

struct SlowBandwidth {
  double typical_gbps = 0;    // see judge_bandwidth; 0 when unknown
  double threshold_gbps = 0;  // a pair below it is slow; 0 when nothing can be judged
  std::vector<SlowNode> nodes;
  std::vector<SlowLink> links;
  // Slow pairs that no slow node explains, between nodes not both fast with another peer: the
  // node cannot be told from the link (two nodes, or half a node's pairs slow).
  std::vector<SlowLink> unresolved;
  // More than half the nodes below the bar (judge_bandwidth's `split`): nothing is named
  // slow; these are the nodes below it, for a warning.
  bool split = false;
  std::vector<int> below_the_fast;
  double fastest_of_the_rest_gbps = 0;
  int measured_nodes = 0;
};

// Names what makes pairs slow, by judge_bandwidth's bar and fast nodes. A node is slow in a
// direction when it was measured that way with two fast peers or more and more than half of
// those pairs are slow: a healthy node's pairs with slow peers do not count against it, so
// this holds with up to half the nodes slow. A slow pair that no slow node explains, between
// nodes each fast with another peer, is a slow link.
SlowBandwidth find_slow_bandwidth(int nodes, const std::vector<PairBandwidth>& pairs,
                                  const BandwidthBar& bar);

// For each node, whether `value_of(node)` differs from the value most nodes share.
std::vector<bool> differs_from_majority(const std::vector<std::string>& values);

}  // namespace muster
