// Judging what the network pass measured: which pairs failed and which silences are
// excused, which nodes and links are slow (by probes/bandwidth_judge.h), where MASTER_ADDR
// and the interfaces go, all in the words ping and doctor print. cluster_ping.cpp measures.
#include "launcher/job/network_verdicts.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/job/node_facts.h"

namespace muster {
namespace {

using Severity = Finding::Severity;

// A pair below half the cluster's typical bandwidth is slow unless the cluster file says.
constexpr double kDefaultBandwidthRatio = 0.5;

// A stream below a hundredth of its link's line rate is named. No higher: one TCP stream of
// 150 ms, on one core and partly in slow start, can stay at a few percent of a 400 Gbit/s
// link's rate on a healthy node; a link that lost its speed (a 30 Mbit/s cap on a 10 Gbit/s
// port) falls far below a hundredth.
constexpr double kLineRateFraction = 0.01;

}  // namespace

// A probe that timed out while its prober was short of CPU is excused (unknown, not a
// failure) only when its target was short of CPU too: a probe needs both ends to run, and
// one busy end with an idle other does not explain a silence (pair_schedule.h: "prober or
// target"). The target's evidence is its own pressure over the last 10 s, the highest it
// reported while it probed others in this pass. Probes that never ran (an ask's budget spent
// before their turn) stay unknown: nothing was measured.
namespace {

// The share of the time some task on `node` waited for a CPU between two of its answers
// around [from, to] (seconds of the pass): the last before the window and the first after it,
// or the nearest there is on a side without one. The target's side of a failed probe, over
// the window of the prober's. Unset without two answers.
std::optional<std::pair<double, double>> cpu_shortage_around(const NodeStatus& node, double from, double to) {
  const auto& samples = node.cpu_stall_samples;  // in the order answered
  if (samples.size() < 2) return std::nullopt;
  auto after = std::find_if(samples.begin(), samples.end(), [&](const auto& s) { return s.first >= to; });
  if (after == samples.end()) --after;
  auto before = samples.begin();
  for (auto it = samples.begin(); it != after; ++it)
    if (it->first <= from) before = it;
  if (after->first <= before->first || after->second < before->second) return std::nullopt;
  const double seconds = after->first - before->first;
  return std::pair(double(after->second - before->second) / 1e6 / seconds, seconds);
}

}  // namespace

void excuse_only_what_both_ends_explain(PingReport& report) {
  constexpr double kShortOfCpu = 0.5;  // as starvation_between judges the prober
  for (PairProbe& p : report.pairs) {
    if (p.result.reachable || p.result.starved.empty() || p.result.error == "not probed") continue;
    const NodeStatus& target = report.nodes[size_t(p.dst)];
    // The target's shortage over the probe's own window where its answers bracket it; else
    // its pressure over the last 10 s, the highest it reported.
    const auto around = cpu_shortage_around(target, p.asked_s, p.answered_s);
    const std::optional<double> share = around ? std::optional(around->first) : target.cpu_pressure_peak;
    const std::string over =
        around ? fmt::format("{:.2f} s around the probe", around->second) : std::string("last 10 s");
    if (share && *share >= kShortOfCpu) {
      p.result.starved += fmt::format("; and on {} some task waited for a CPU {:.0f}% of the {}", target.host,
                                      100 * std::min(*share, 1.0), over);
      continue;
    }
    p.result.error += fmt::format("; its prober was short of CPU ({}), but {} was not{}, so that does not explain it",
                                  p.result.starved, target.host,
                                  share ? fmt::format(" ({:.0f}% of the {})", 100 * *share, over)
                                        : " (it reported no CPU pressure)");
    p.result.starved.clear();
  }
}

// MASTER_ADDR on the first node reached that is not in `avoid`, or on the first reached.
void choose_rendezvous(const ClusterSpec& cluster, PingReport& report, const std::set<int>& avoid) {
  std::vector<int> reachable;
  for (size_t i = 0; i < report.nodes.size(); ++i)
    if (report.nodes[i].facts) reachable.push_back(int(i));
  if (reachable.empty()) return;
  const auto healthy = std::find_if(reachable.begin(), reachable.end(), [&](int i) { return !avoid.count(i); });
  if (healthy != reachable.end()) std::rotate(reachable.begin(), healthy, healthy + 1);
  report.rendezvous_node = reachable.front();
  std::map<int, int> index_of;
  std::vector<std::vector<LocalAddress>> addresses;
  for (size_t k = 0; k < reachable.size(); ++k) {
    index_of[reachable[k]] = int(k);
    addresses.push_back(report.nodes[size_t(reachable[k])].facts->addresses);
  }
  // Renumbered to the reachable nodes only when some were not, or the first moved: the
  // probes can number n^2.
  std::vector<PairProbe> renumbered;
  const bool all_reached = reachable.size() == report.nodes.size() && reachable.front() == 0;
  if (!all_reached)
    for (auto p : report.pairs) {
      if (!index_of.count(p.src) || !index_of.count(p.dst)) continue;
      p.src = index_of.at(p.src);
      p.dst = index_of.at(p.dst);
      renumbered.push_back(p);
    }
  NetworkChoice choice = choose_network(addresses, all_reached ? report.pairs : renumbered,
                                        cluster.nodes[size_t(reachable.front())].address,
                                        report.schedule);
  report.choice.master_addr = choice.master_addr;
  report.choice.subnet = choice.subnet;
  for (auto [k, name] : choice.interface_of) report.choice.interface_of[reachable[size_t(k)]] = name;
}

void add(std::vector<Finding>& found, Severity severity, FindingKind kind, std::optional<int> node,
         std::string message) {
  found.push_back({kind, severity, node, std::move(message)});
}

// A finding about the link between two nodes, not either node.
void add_link(std::vector<Finding>& found, Severity severity, std::pair<int, int> link, std::string message) {
  found.push_back({FindingKind::Bandwidth, severity, std::nullopt, std::move(message), link});
}

BandwidthBar bandwidth_bar(const CheckThresholds& checks) {
  return {checks.min_bandwidth_ratio.value_or(kDefaultBandwidthRatio), checks.min_bandwidth_gbps};
}

namespace {

// What the bar is, in the words of the cluster file.
std::string bandwidth_bar_words(const CheckThresholds& checks, double typical_gbps) {
  if (checks.min_bandwidth_gbps)
    return fmt::format("below checks.min_bandwidth_gbps {:g}", *checks.min_bandwidth_gbps);
  return fmt::format("below {:g}x the typical {:.2f} Gbit/s between fast nodes (checks.min_bandwidth_ratio)",
                     checks.min_bandwidth_ratio.value_or(kDefaultBandwidthRatio), typical_gbps);
}

// More than half the nodes below half the others: a warning naming them, never a pass and
// never a failure of either group, since nothing measured says which one is typical.
void report_split(const ClusterSpec& cluster, const std::vector<int>& below, int measured, double typical_gbps,
                  double rest_gbps, const std::function<std::string(int)>& host, std::vector<Finding>& report) {
  std::vector<std::string> names;
  for (int node : below) names.push_back(host(node));
  add(report, Severity::Warn, FindingKind::Bandwidth, std::nullopt,
      fmt::format("bandwidth is split: {} of {} nodes reach {:.2f} Gbit/s and the other {} at most {:.2f} "
                  "Gbit/s ({}); with more than half the nodes below {:g}x the fastest, nothing measured says "
                  "which is typical: set checks.min_bandwidth_gbps to judge them",
                  measured - int(below.size()), measured, typical_gbps, below.size(), rest_gbps,
                  fmt::join(names, ", "), cluster.checks.min_bandwidth_ratio.value_or(kDefaultBandwidthRatio)));
}

// A slow link's measured directions: "0.50 Gbit/s node3 -> node4 and 0.50 Gbit/s node4 -> node3".
std::string link_directions(const SlowLink& l, const std::function<std::string(int)>& host) {
  std::vector<std::string> ways;
  if (l.a_to_b_gbps) ways.push_back(fmt::format("{:.2f} Gbit/s {} -> {}", *l.a_to_b_gbps, host(l.a), host(l.b)));
  if (l.b_to_a_gbps) ways.push_back(fmt::format("{:.2f} Gbit/s {} -> {}", *l.b_to_a_gbps, host(l.b), host(l.a)));
  return fmt::format("{}", fmt::join(ways, " and "));
}

// Slow nodes, named with the directions that are slow and the numbers beside the bar; slow
// links, named by both ends. A link is a failure only once measured again alone: a stream
// that shared this machine's CPU with others can look slow when the link is not.
void report_slow_bandwidth(const ClusterSpec& cluster, const PingReport& in, std::vector<Finding>& report) {
  const std::function<std::string(int)> host = [&](int i) { return in.nodes[size_t(i)].host; };
  const SlowBandwidth slow = slow_bandwidth_of(cluster, in);
  const std::string bar = bandwidth_bar_words(cluster.checks, slow.typical_gbps);
  if (slow.split)
    report_split(cluster, slow.below_the_fast, slow.measured_nodes, slow.typical_gbps,
                 slow.fastest_of_the_rest_gbps, host, report);
  // Measured but not judged is no pass: two nodes, whose one pair cannot tell which end is slow.
  if (slow.threshold_gbps <= 0 && slow.measured_nodes >= 2)
    add(report, Severity::Warn, FindingKind::Bandwidth, std::nullopt,
        fmt::format("bandwidth not judged: {} nodes measured, typical {:.2f} Gbit/s, and with fewer than three a "
                    "pair alone cannot tell which end is slow; set checks.min_bandwidth_gbps to judge it",
                    slow.measured_nodes, slow.typical_gbps));
  for (const SlowNode& s : slow.nodes) {
    std::vector<std::string> slow_ways, other_ways;
    (s.sending ? slow_ways : other_ways).push_back(fmt::format("{:.2f} Gbit/s sending", s.sending_gbps));
    (s.receiving ? slow_ways : other_ways).push_back(fmt::format("{:.2f} Gbit/s receiving", s.receiving_gbps));
    add(report, Severity::Fail, FindingKind::Bandwidth, s.node,
        fmt::format("{}: bandwidth to its peers is {} (median over {} peers{}), {}", host(s.node),
                    fmt::join(slow_ways, " and "), s.peers,
                    other_ways.empty() ? "" : fmt::format("; {} is fine", other_ways.front()), bar));
  }
  // Ordered pairs measured again alone and still slow beside what their ends did with other
  // peers at that moment; and those whose ends were as slow with their fast peers (a busy
  // machine). Judged on the chosen interface's address, as the analysis is.
  const double ratio = cluster.checks.min_bandwidth_ratio.value_or(kDefaultBandwidthRatio);
  const auto& bar_gbps = cluster.checks.min_bandwidth_gbps;
  std::set<std::pair<int, int>> confirmed_slow;
  std::map<std::pair<int, int>, const PairProbe*> ends_slow_too;
  for (const auto& p : in.pairs) {
    if (!p.gbps_alone || !p.control_gbps || !on_chosen_interface(in, p)) continue;
    const double best = *p.best_gbps(), control = *p.control_gbps;
    // Below the ratio of what its ends could do; or, where the cluster file sets a bar, below
    // it while its ends could reach it.
    if (best < ratio * control || (bar_gbps && best < *bar_gbps && control >= *bar_gbps))
      confirmed_slow.insert({p.src, p.dst});
    else
      ends_slow_too[{p.src, p.dst}] = &p;
  }
  for (const SlowLink& l : slow.links) {
    std::vector<std::pair<int, int>> ways;  // the link's slow directions
    if (l.a_to_b_gbps) ways.emplace_back(l.a, l.b);
    if (l.b_to_a_gbps) ways.emplace_back(l.b, l.a);
    const bool confirmed = std::all_of(ways.begin(), ways.end(), [&](auto w) { return confirmed_slow.count(w) > 0; });
    std::string why_not;
    for (auto way : ways)
      if (const auto busy = ends_slow_too.find(way); !confirmed && busy != ends_slow_too.end() && why_not.empty()) {
        const PairProbe& q = *busy->second;
        why_not = fmt::format(" (measured again alone, {} -> {} ran at {:.2f} Gbit/s and {} -> {} at {:.2f} "
                              "Gbit/s: its ends were slow with their fast peers too, so the link is not yet a "
                              "failure; measure again when the nodes are idle)",
                              host(q.src), host(q.dst), *q.best_gbps(), host(q.control_src), host(q.control_dst),
                              *q.control_gbps);
      }
    if (!confirmed && why_not.empty())
      why_not = " (measured once, beside other streams: not yet a failure; "
                "muster ping --bandwidth measures it again alone)";
    add_link(report, confirmed ? Severity::Fail : Severity::Warn, {l.a, l.b},
             fmt::format("the link {} <-> {} is slow: {}, {}; both nodes are fast with their other peers{}",
                         host(l.a), host(l.b), link_directions(l, host), bar, why_not));
  }
  for (const SlowLink& l : slow.unresolved) {
    add_link(report, Severity::Fail, {l.a, l.b},
             fmt::format("{} <-> {}: {}, {}; with no fast pair at one end to compare, the node cannot be "
                         "told from the link", host(l.a), host(l.b), link_directions(l, host), bar));
  }
}

// The line rate of the interface each node's peers reach it on (the chosen one), where its
// kernel said.
std::map<int, std::pair<std::string, double>> chosen_line_rates(const PingReport& in) {
  std::map<int, std::pair<std::string, double>> out;
  for (const auto& [node, interface] : in.choice.interface_of) {
    if (!in.nodes[size_t(node)].facts) continue;
    for (const auto& a : in.nodes[size_t(node)].facts->addresses)
      if (a.interface == interface && a.line_rate_gbps) out[node] = {interface, *a.line_rate_gbps};
  }
  return out;
}

// What the kernels say the links trained to: a node whose interface runs below the others'
// (every stream through it is capped there, however alike its peers' numbers are), and a node
// whose streams fall below a hundredth of their links' line rate (where every node is alike,
// the median cannot tell). The cluster file's checks.min_bandwidth_gbps replaces the second.
void report_line_rates(const ClusterSpec& cluster, const PingReport& in, const SlowBandwidth& slow,
                       std::vector<Finding>& report) {
  const auto rates = chosen_line_rates(in);
  auto host = [&](int i) { return in.nodes[size_t(i)].host; };
  const double ratio = cluster.checks.min_bandwidth_ratio.value_or(kDefaultBandwidthRatio);
  std::set<int> named;
  for (const SlowNode& s : slow.nodes) named.insert(s.node);
  if (rates.size() >= 3) {
    std::vector<double> all;
    for (const auto& [node, rate] : rates) all.push_back(rate.second);
    std::sort(all.begin(), all.end());
    const double median = all[all.size() / 2];
    // A warning: a rate is what a driver says, and a virtual device (a container's veth says
    // 10 Gbit/s) beside 100 Gbit/s hosts is no fault. Its streams are judged by their numbers.
    for (const auto& [node, rate] : rates)
      if (rate.second < ratio * median)
        add(report, Severity::Warn, FindingKind::Bandwidth, node,
            fmt::format("{}: {} links at {:g} Gbit/s, below {:g}x the nodes' median line rate of {:g} Gbit/s: "
                        "every stream through it is capped there (a link that trained down: check its "
                        "cable, port and switch)", host(node), rate.first, rate.second, ratio, median));
  }
  if (cluster.checks.min_bandwidth_gbps) return;
  // Per node and direction: pairs measured, pairs below a hundredth of the slower end's line rate.
  std::map<int, std::array<std::vector<double>, 2>> measured, below;
  for (const auto& p : pair_bandwidths(in)) {
    const auto src = rates.find(p.src), dst = rates.find(p.dst);
    if (src == rates.end() || dst == rates.end()) continue;
    const bool is_below = p.gbps < kLineRateFraction * std::min(src->second.second, dst->second.second);
    for (auto [node, way] : {std::pair(p.src, 0), std::pair(p.dst, 1)}) {
      measured[node][size_t(way)].push_back(p.gbps);
      if (is_below) below[node][size_t(way)].push_back(p.gbps);
    }
  }
  for (auto& [node, ways] : measured) {
    if (named.count(node)) continue;
    std::vector<std::string> slow_ways;
    for (size_t way : {0u, 1u}) {
      auto& all = ways[way];
      if (all.size() < 2 || below[node][way].size() * 2 <= all.size()) continue;
      std::sort(all.begin(), all.end());
      slow_ways.push_back(fmt::format("{:.2f} Gbit/s {} (median over {} peers)", all[all.size() / 2],
                                      way == 0 ? "sending" : "receiving", all.size()));
    }
    if (slow_ways.empty()) continue;
    const auto& [interface, rate] = rates.at(node);
    add(report, Severity::Fail, FindingKind::Bandwidth, node,
        fmt::format("{}: bandwidth to its peers is {}, below {:g}x the line rate of the links (its {} "
                    "runs at {:g} Gbit/s)", host(node), fmt::join(slow_ways, " and "), kLineRateFraction,
                    interface, rate));
  }
}

std::vector<Finding> find_problems(const ClusterSpec& cluster, const PingReport& in) {
  std::vector<Finding> report;
  const auto& nodes = in.nodes;
  auto host = [&](int i) { return nodes[size_t(i)].host; };
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!nodes[i].reach.ok) add(report, Severity::Fail, FindingKind::Reach, int(i), nodes[i].reach.failure);

  // Two entries that are one machine would run duplicate ranks on the same GPUs. Every
  // such group is named once: by machine-id, or by boot id when only that matches.
  std::set<std::vector<int>> reported;
  for (const char* what : {"machine-id", "boot-id"}) {
    std::map<std::string, std::vector<int>> same;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!nodes[i].facts) continue;
      const std::string& id = std::string(what) == "machine-id" ? nodes[i].facts->machine_id
                                                                : nodes[i].facts->boot_id;
      if (!id.empty()) same[id].push_back(int(i));
    }
    for (const auto& [id, group] : same)
      if (group.size() > 1 && reported.insert(group).second) {
        std::vector<std::string> names;
        for (int i : group) names.push_back(fmt::format("{} ({})", host(i), nodes[size_t(i)].address));
        add(report, Severity::Fail, FindingKind::Identity, group.back(),
            fmt::format("{} are the same machine (same {} {}); list each machine once, or its "
                        "ranks and GPUs would be used twice", fmt::join(names, " and "),
                        std::string(what) == "machine-id" ? "/etc/machine-id" : "boot id", id));
      }
  }

  // A pair is a verdict only after every attempt at it: one that answered on a retry is a
  // warning (a lost packet, a busy node), not an unreachable address; one whose last attempt
  // failed while its prober's machine was short of CPU measured the machine: unknown.
  // A pair with a node that was lost says nothing of the network: the loss is the finding.
  auto lost = [&](int node) { return !nodes[size_t(node)].facts; };
  for (const auto& p : in.pairs)
    if (lost(p.src) || lost(p.dst))
      continue;
    else if (!p.result.reachable && !p.result.starved.empty())
      add(report, Severity::Warn, FindingKind::Pair, p.src,
          fmt::format("{} -> {} at {} ({}) is unknown, not measured: {} on attempt {}, and on {} {}",
                      host(p.src), host(p.dst), p.address, p.interface, p.result.error, p.attempts,
                      host(p.src), p.result.starved));
    else if (!p.result.reachable)
      add(report, Severity::Fail, FindingKind::Pair, p.src,
          fmt::format("{} cannot reach {} at {} ({}): {}{}", host(p.src), host(p.dst), p.address,
                      p.interface, p.result.error,
                      p.attempts > 1 ? fmt::format(", on each of {} attempts", p.attempts) : ""));
    else if (!p.first_error.empty())
      add(report, Severity::Warn, FindingKind::Pair, p.src,
          fmt::format("{} reached {} at {} ({}) only on attempt {}; the first failed: {}", host(p.src),
                      host(p.dst), p.address, p.interface, p.attempts, p.first_error));

  // Dropped packets are the node's own symptom (a backlog its CPUs could not drain), said as
  // a warning with its count, and never an excuse for a failure.
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].facts && nodes[i].dropped_packets > 0)
      add(report, Severity::Warn, FindingKind::Pair, int(i),
          fmt::format("{}: its kernel dropped {} packet{} it had no time to process while it probed its peers "
                      "(/proc/net/softnet_stat, column 2): its CPUs cannot keep up with the network; look at "
                      "interrupt affinity (irqbalance) and net.core.netdev_max_backlog",
                      host(int(i)), nodes[i].dropped_packets, nodes[i].dropped_packets == 1 ? "" : "s"));

  const int n = int(nodes.size());
  for (const auto& o : rtt_outliers(n, in.pairs, 4.0))
    add(report, Severity::Warn, FindingKind::Rtt, o.node,
        fmt::format("{}: RTT to every peer is {:.0f}x the cluster median", host(o.node), o.ratio));
  report_slow_bandwidth(cluster, in, report);
  report_line_rates(cluster, in, slow_bandwidth_of(cluster, in), report);

  const CheckThresholds& checks = cluster.checks;
  for (const auto& p : in.pairs)
    if (p.result.reachable && checks.max_rtt_ms && p.result.rtt.median_us / 1000 > *checks.max_rtt_ms)
      add(report, Severity::Fail, FindingKind::Rtt, p.src,
          fmt::format("{} -> {} at {}: median RTT {:.3f} ms is above checks.max_rtt_ms {:g}",
                      host(p.src), host(p.dst), p.address, p.result.rtt.median_us / 1000,
                      *checks.max_rtt_ms));
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& node = nodes[i];
    // A skew is a failure only beyond what the measurement itself cannot tell apart.
    if (node.clock_offset_ms && checks.max_clock_skew_ms &&
        std::abs(*node.clock_offset_ms) - node.clock_error_ms > *checks.max_clock_skew_ms)
      add(report, Severity::Fail, FindingKind::Clock, int(i),
          fmt::format("{}: clock is {:+.1f} ms (±{:.1f}) off the head's, beyond checks.max_clock_skew_ms {:g}",
                      node.host, *node.clock_offset_ms, node.clock_error_ms, *checks.max_clock_skew_ms));
  }

  // Facts that set a node apart from the majority: a missing GPU, another kernel.
  std::vector<int> with_facts;
  std::vector<NodeHello> hellos;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].facts) {
      with_facts.push_back(int(i));
      hellos.push_back(*nodes[i].facts);
    }
  auto differences = differences_from_majority(hellos);
  for (size_t k = 0; k < with_facts.size(); ++k)
    for (const auto& d : differences[k])
      add(report, Severity::Warn, FindingKind::Facts, with_facts[k],
          fmt::format("{}: {} {}, most nodes have {}", host(with_facts[k]), d.what, d.value, d.usual));

  // A kernel whose neighbour table is smaller than the cluster cannot resolve every peer:
  // past the limit a rank's connection is "No route to host", whatever the network.
  const std::uint64_t peers = nodes.size() - 1;
  for (int i : with_facts)
    if (const auto limit = nodes[size_t(i)].facts->neighbour_limit; limit && *limit < peers)
      add(report, Severity::Warn, FindingKind::Interfaces, i,
          fmt::format("{}: its kernel holds at most {} neighbours (net.ipv4.neigh.default.gc_thresh3), "
                      "fewer than its {} peers: ranks that talk to every peer will find some with "
                      "\"No route to host\"; raise gc_thresh3 and gc_thresh2 above {}",
                      host(i), *limit, peers, peers));

  if (!with_facts.empty() && !in.choice.master_addr)
    add(report, Severity::Fail, FindingKind::Rendezvous, in.rendezvous_node,
        fmt::format("no address of {} was reached by every other node: there is no MASTER_ADDR "
                    "every rank could use", host(in.rendezvous_node)));
  else if (in.choice.master_addr && in.choice.subnet.empty() && with_facts.size() > 1) {
    add(report, Severity::Warn, FindingKind::Interfaces, std::nullopt,
        "no single subnet joins every node: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME are left "
        "to the frameworks");
    // Without an interface, Gloo and NCCL use the address of the host's own name: said here,
    // before any rank starts, where that name does not resolve.
    for (int i : with_facts)
      if (nodes[size_t(i)].facts->name_resolves == false)
        add(report, Severity::Warn, FindingKind::Interfaces, i,
            fmt::format("{}: its name {} does not resolve there to an address off loopback, and "
                        "Gloo and NCCL would fall back to it: set GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME in the cluster "
                        "file's launch.env", host(i), nodes[size_t(i)].facts->hostname));
  }
  return report;
}

}  // namespace

// Whether `p` measured the address its receiver will be reached on: the chosen interface's,
// or any where none was chosen. A link is judged on those alone.
bool on_chosen_interface(const PingReport& report, const PairProbe& p) {
  const auto chosen = report.choice.interface_of.find(p.dst);
  return chosen == report.choice.interface_of.end() || chosen->second == p.interface;
}

bool PingReport::failed() const {
  return std::any_of(problems.begin(), problems.end(),
                     [](const Finding& p) { return p.severity == Severity::Fail; });
}

std::vector<std::string> PingReport::blocking_problems() const {
  std::vector<std::string> out;
  for (const auto& p : problems)
    if (p.severity == Severity::Fail &&
        (p.kind == FindingKind::Identity || p.kind == FindingKind::Rendezvous))
      out.push_back(p.message);
  return out;
}

std::vector<PairBandwidth> pair_bandwidths(const PingReport& report) {
  std::map<std::pair<int, int>, double> best, chosen;
  for (const auto& p : report.pairs) {
    // A lost node's pairs say nothing of the network (its loss is the finding).
    if (!report.nodes[size_t(p.src)].facts || !report.nodes[size_t(p.dst)].facts) continue;
    const auto measured = p.best_gbps();
    if (!measured) continue;
    const double gbps = *measured;
    auto [it, fresh] = best.emplace(std::pair(p.src, p.dst), gbps);
    if (!fresh) it->second = std::max(it->second, gbps);
    const auto interface = report.choice.interface_of.find(p.dst);
    if (interface != report.choice.interface_of.end() && interface->second == p.interface)
      chosen[{p.src, p.dst}] = gbps;
  }
  for (const auto& [ends, gbps] : chosen) best[ends] = gbps;
  std::vector<PairBandwidth> out;
  for (const auto& [ends, gbps] : best) out.push_back({ends.first, ends.second, gbps});
  return out;
}

std::vector<Finding> slow_pair_findings(const ClusterSpec& cluster, const PingReport& report,
                                        const CulpritReport& found) {
  std::vector<Finding> out;
  auto host = [&](int i) { return report.nodes[size_t(i)].host; };
  const std::string bar = bandwidth_bar_words(cluster.checks, found.typical_gbps);
  const auto measured_with = [&](int node) {
    std::vector<std::string> with;
    for (const auto& m : found.measured)
      if (m.a == node || m.b == node) with.push_back(fmt::format("{:.2f} Gbit/s with {}", m.gbps, host(m.a == node ? m.b : m.a)));
    return fmt::format("{}", fmt::join(with, ", "));
  };
  if (found.split) {
    int measured = int(found.below_the_fast.size()) + found.cleared;
    double rest = 0;
    for (const auto& m : found.measured)
      for (int node : found.below_the_fast)
        if (m.a == node || m.b == node) rest = std::max(rest, m.gbps);
    report_split(cluster, found.below_the_fast, measured, found.typical_gbps, rest,
                 [&](int i) { return host(i); }, out);
  }
  for (int node : found.slow_nodes)
    add(out, Severity::Fail, FindingKind::Bandwidth, node,
        fmt::format("{}: bandwidth is slow with every partner ({}), {}; found by pairs in {} rounds",
                    host(node), measured_with(node), bar, found.rounds));
  for (auto [a, b] : found.slow_links) {
    double gbps = 0;
    for (const auto& m : found.measured)
      if ((m.a == a && m.b == b) || (m.a == b && m.b == a)) gbps = m.gbps;
    add_link(out, Severity::Fail, {a, b},
             fmt::format("the link {} <-> {} is slow: {:.2f} Gbit/s, {}; both nodes are fast with other "
                         "partners; found by pairs in {} rounds", host(a), host(b), gbps, bar, found.rounds));
  }
  for (auto [a, b] : found.unknown_links) {
    add_link(out, Severity::Warn, {a, b},
             fmt::format("the link {} <-> {} was slow once, beside the other pairs' streams, and not measured "
                         "again: unknown; muster ping --bandwidth measures every pair", host(a), host(b)));
  }
  for (int node : found.unknown)
    add(out, Severity::Warn, FindingKind::Bandwidth, node,
        found.measured.end() == std::find_if(found.measured.begin(), found.measured.end(),
                                             [&](const MeasuredPair& m) { return m.a == node || m.b == node; })
            ? fmt::format("{}: no stream to or from it could be measured: its bandwidth is unknown", host(node))
            : fmt::format("{}: slow with the partners it was measured with ({}), with no partner known good "
                          "left to tell the node from its links: unknown", host(node), measured_with(node)));
  return out;
}

SlowBandwidth slow_bandwidth_of(const ClusterSpec& cluster, const PingReport& report) {
  return find_slow_bandwidth(int(report.nodes.size()), pair_bandwidths(report), bandwidth_bar(cluster.checks));
}

void analyze_probes(const ClusterSpec& cluster, PingReport& report) {
  choose_rendezvous(cluster, report);
  report.problems = find_problems(cluster, report);
  place_rendezvous(cluster, report);
}

void place_rendezvous(const ClusterSpec& cluster, PingReport& report, const std::set<int>& failed_elsewhere) {
  std::set<int> failed = failed_elsewhere;
  for (const auto& f : report.problems)
    if (f.severity == Severity::Fail && f.node && f.kind != FindingKind::Rendezvous) failed.insert(*f.node);
  int first = -1;
  for (size_t i = 0; i < report.nodes.size() && first < 0; ++i)
    if (report.nodes[i].facts) first = int(i);
  if (first < 0 || !failed.count(first)) return;
  choose_rendezvous(cluster, report, failed);
  report.rendezvous_passed_over.reset();
  report.rendezvous_on_failed_node = report.rendezvous_node == first;
  if (report.rendezvous_node != first) report.rendezvous_passed_over = first;
  // The finding that no address of the rendezvous node was reached by all is about the node
  // now chosen.
  auto& problems = report.problems;
  problems.erase(std::remove_if(problems.begin(), problems.end(),
                                [](const Finding& f) { return f.kind == FindingKind::Rendezvous; }),
                 problems.end());
  if (!report.choice.master_addr)
    add(problems, Severity::Fail, FindingKind::Rendezvous, report.rendezvous_node,
        fmt::format("no address of {} was reached by every other node: there is no MASTER_ADDR every rank "
                    "could use", report.nodes[size_t(report.rendezvous_node)].host));
}

}  // namespace muster
