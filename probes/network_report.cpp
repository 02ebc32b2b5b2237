#include "probes/network_report.h"

#include <algorithm>
#include <set>

#include "launcher/median.h"

namespace muster {
namespace {

}  // namespace

std::vector<std::vector<std::pair<int, int>>> tournament_rounds(int n) {
  std::vector<std::vector<std::pair<int, int>>> rounds;
  if (n < 2) return rounds;
  // The circle method: fix node 0, rotate the others; with an odd count a "bye" (-1) pads.
  std::vector<int> ring;
  for (int i = 0; i < n; ++i) ring.push_back(i);
  if (n % 2) ring.push_back(-1);
  const int m = int(ring.size());
  for (int r = 0; r < m - 1; ++r) {
    std::vector<std::pair<int, int>> forward, backward;
    for (int k = 0; k < m / 2; ++k) {
      int a = ring[size_t(k)], b = ring[size_t(m - 1 - k)];
      if (a < 0 || b < 0) continue;
      forward.emplace_back(a, b);
      backward.emplace_back(b, a);
    }
    rounds.push_back(forward);
    rounds.push_back(backward);
    std::rotate(ring.begin() + 1, ring.end() - 1, ring.end());
  }
  return rounds;
}

std::vector<std::vector<std::pair<int, int>>> rendezvous_rounds(int n) {
  std::vector<std::vector<std::pair<int, int>>> rounds;
  if (n < 2) return rounds;
  rounds.resize(2);
  for (int node = 1; node < n; ++node) {
    rounds[0].emplace_back(node, 0);
    rounds[1].emplace_back(0, node);
  }
  return rounds;
}

NetworkChoice choose_network(const std::vector<std::vector<LocalAddress>>& addresses_of_node,
                             const std::vector<PairProbe>& probes,
                             const std::string& preferred_address, PairSchedule schedule) {
  const int n = int(addresses_of_node.size());
  NetworkChoice choice;
  if (n == 0) return choice;
  // An address is good when no node that should reach it failed to, for certain, and some
  // node did: every other node over the mesh; over the rendezvous pairs, node 0 for the
  // others' addresses (node 0's own, the MASTER_ADDR candidates, are still probed by all).
  // A measurement that was starved is no evidence either way, so it cannot take a subnet
  // away (or give one). One pass over the probes, per node and address: O(probes), where
  // asking every probe for every node, address and candidate was O(n^4).
  struct Evidence {
    std::vector<bool> reached_from;  // by source node
    bool refuted = false;            // a source that matters failed to reach it, for certain
  };
  auto matters = [&](int src, int dst) {
    return schedule == PairSchedule::Every || dst == 0 || src == 0;
  };
  std::map<std::pair<int, std::string>, Evidence> evidence;
  for (const PairProbe& p : probes) {
    if (p.src == p.dst || p.src < 0 || p.src >= n || !matters(p.src, p.dst)) continue;
    Evidence& e = evidence[{p.dst, p.address}];
    if (e.reached_from.empty()) e.reached_from.resize(size_t(n));
    if (p.result.reachable) e.reached_from[size_t(p.src)] = true;
    else if (p.result.starved.empty()) e.refuted = true;
  }
  auto reached_by_all = [&](int node, const std::string& address) {
    if (n == 1) return true;
    auto it = evidence.find({node, address});
    if (it == evidence.end() || it->second.refuted) return false;
    const auto& from = it->second.reached_from;
    return std::find(from.begin(), from.end(), true) != from.end();
  };
  // Subnets in the order of node 0's addresses, the preferred one first.
  std::vector<LocalAddress> node0 = addresses_of_node[0];
  std::stable_partition(node0.begin(), node0.end(),
                        [&](const LocalAddress& a) { return a.address == preferred_address; });
  for (const LocalAddress& candidate : node0) {
    if (is_loopback(candidate.address)) continue;
    const std::string subnet = subnet_of(candidate.address, candidate.prefix_length);
    std::map<int, std::string> interface_of;
    for (int node = 0; node < n; ++node)
      for (const auto& a : addresses_of_node[size_t(node)])
        if (subnet_of(a.address, a.prefix_length) == subnet && reached_by_all(node, a.address)) {
          interface_of[node] = a.interface;
          break;
        }
    if (int(interface_of.size()) == n && reached_by_all(0, candidate.address)) {
      choice.master_addr = candidate.address;
      choice.subnet = subnet;
      choice.interface_of = interface_of;
      return choice;
    }
  }
  // No one subnet joins everyone: still a rendezvous address if routing gets everyone to it.
  for (const LocalAddress& candidate : node0)
    if (!is_loopback(candidate.address) && reached_by_all(0, candidate.address)) {
      choice.master_addr = candidate.address;
      break;
    }
  return choice;
}

std::vector<Outlier> rtt_outliers(int nodes, const std::vector<PairProbe>& probes, double factor) {
  std::vector<double> all;
  std::vector<std::vector<double>> per_node(size_t(std::max(nodes, 0)));
  for (const auto& p : probes) {
    if (!p.result.reachable) continue;
    all.push_back(p.result.rtt.median_us);
    per_node[size_t(p.src)].push_back(p.result.rtt.median_us);
    per_node[size_t(p.dst)].push_back(p.result.rtt.median_us);
  }
  const double cluster = median(all);
  std::vector<Outlier> out;
  if (nodes < 3 || cluster <= 0) return out;  // with two nodes there is no majority to compare
  for (int node = 0; node < nodes; ++node) {
    // Every one of the node's links is slow, not just one bad pair.
    const auto& mine = per_node[size_t(node)];
    if (mine.empty()) continue;
    double fastest = *std::min_element(mine.begin(), mine.end());
    if (fastest >= factor * cluster) out.push_back({node, median(mine) / cluster});
  }
  return out;
}

SlowBandwidth find_slow_bandwidth(int nodes, const std::vector<PairBandwidth>& pairs,
                                  const BandwidthBar& bar) {
  SlowBandwidth out;
  const size_t n = size_t(std::max(nodes, 0));
  std::vector<PairBandwidth> valid;
  std::vector<PairFigure> figures;
  for (const auto& p : pairs)
    if (p.src >= 0 && p.dst >= 0 && size_t(p.src) < n && size_t(p.dst) < n && p.src != p.dst) {
      valid.push_back(p);
      figures.push_back({p.src, p.dst, p.gbps});
    }
  const TypicalBandwidth judged = judge_bandwidth(nodes, figures, bar);
  out.typical_gbps = judged.typical_gbps;
  out.threshold_gbps = judged.threshold_gbps;
  out.measured_nodes = judged.measured_nodes;
  if (out.threshold_gbps <= 0) return out;
  const std::vector<bool>& fast_somewhere = judged.fast;
  if (judged.split) {
    out.split = true;
    out.fastest_of_the_rest_gbps = judged.fastest_of_the_rest_gbps;
    std::set<int> measured;
    for (const auto& p : valid) measured.insert({p.src, p.dst});
    for (int node : measured)
      if (!fast_somewhere[size_t(node)]) out.below_the_fast.push_back(node);
    return out;
  }
  const auto slow = [&](double gbps) { return gbps < out.threshold_gbps; };
  // A node is judged by its pairs with fast peers. Only the cluster file's figure can leave
  // no node fast (all below it): then every pair counts.
  const auto counts = [&](int peer) { return judged.fast_nodes == 0 || fast_somewhere[size_t(peer)]; };
  std::vector<std::vector<double>> sending(n), receiving(n);
  for (const auto& p : valid) {
    if (counts(p.dst)) sending[size_t(p.src)].push_back(p.gbps);
    if (counts(p.src)) receiving[size_t(p.dst)].push_back(p.gbps);
  }
  const auto mostly_slow = [&](const std::vector<double>& v) {
    return v.size() >= 2 && 2 * std::count_if(v.begin(), v.end(), slow) > std::ptrdiff_t(v.size());
  };
  std::vector<bool> slow_sender(n), slow_receiver(n);
  for (size_t i = 0; i < n; ++i) {
    slow_sender[i] = mostly_slow(sending[i]);
    slow_receiver[i] = mostly_slow(receiving[i]);
    if (slow_sender[i] || slow_receiver[i])
      out.nodes.push_back({int(i), slow_sender[i], slow_receiver[i], median(sending[i]),
                           median(receiving[i]), int(std::max(sending[i].size(), receiving[i].size()))});
  }
  // A link is named only between nodes each fast with some peer: otherwise nothing tells the
  // link from its ends (two nodes, or a node half of whose pairs are slow).
  std::map<std::pair<int, int>, SlowLink> links, unresolved;
  for (const auto& p : valid) {
    if (!slow(p.gbps)) continue;
    if (slow_sender[size_t(p.src)] || slow_receiver[size_t(p.dst)]) continue;  // a slow node's pair
    const int a = std::min(p.src, p.dst), b = std::max(p.src, p.dst);
    const bool told_apart = fast_somewhere[size_t(a)] && fast_somewhere[size_t(b)];
    SlowLink& link = (told_apart ? links : unresolved)[{a, b}];
    link.a = a;
    link.b = b;
    (p.src == a ? link.a_to_b_gbps : link.b_to_a_gbps) = p.gbps;
  }
  for (auto& [ends, link] : links) out.links.push_back(link);
  for (auto& [ends, link] : unresolved) out.unresolved.push_back(link);
  return out;
}

std::vector<bool> differs_from_majority(const std::vector<std::string>& values) {
  std::map<std::string, int> count;
  for (const auto& v : values) ++count[v];
  std::string mode;
  int best = 0;
  for (const auto& [v, c] : count)
    if (c > best) {
      best = c;
      mode = v;
    }
  std::vector<bool> out;
  // Only a strict majority makes the others odd: with two nodes that differ, neither is.
  for (const auto& v : values) out.push_back(best * 2 > int(values.size()) && v != mode);
  return out;
}

}  // namespace muster
