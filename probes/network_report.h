// Making sense of node-to-node probes: the schedule that keeps measurements from
// disturbing each other, the interface every node can use, and the outliers.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
  std::string first_error;  // why an earlier attempt failed, when one did
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
// Nodes whose sending bandwidth is at most `fraction` of the cluster median.
std::vector<Outlier> bandwidth_outliers(int nodes, const std::vector<PairProbe>& probes,
                                        double fraction);

// For each node, whether `value_of(node)` differs from the value most nodes share.
std::vector<bool> differs_from_majority(const std::vector<std::string>& values);

}  // namespace muster
