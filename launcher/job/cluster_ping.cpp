#include "launcher/job/cluster_ping.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "launcher/job/node_facts.h"
#include "launcher/remote/agent.h"
#include "topology/topology_source.h"
#include "launcher/json_fields.h"
#include "launcher/text_bytes.h"

namespace muster {
namespace {

using Severity = Finding::Severity;
using std::chrono::milliseconds;

// Clock offset of a node: its wall clock against the middle of our request's round trip.
void measure_clocks(ClusterSession& session, PingReport& report, const std::vector<int>& interrupts) {
  std::vector<std::pair<size_t, std::string>> asks;
  for (size_t i = 0; i < report.nodes.size(); ++i)
    if (session.usable(i)) asks.emplace_back(i, R"({"op":"clock"})");
  auto answers = session.ask(asks, milliseconds(10000), interrupts);
  for (size_t k = 0; k < asks.size(); ++k) {
    const AskAnswer& a = answers[k];
    if (!a.payload) continue;
    auto j = parse_untrusted_json_or_discarded(*a.payload);
    if (!j.is_object() || !j.contains("unix_ns") || !j["unix_ns"].is_number()) continue;  // no offset
    double remote_ns = j.at("unix_ns").get<double>();
    double middle_ns = double(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  (a.sent + (a.answered - a.sent) / 2).time_since_epoch()).count());
    report.nodes[asks[k].first].clock_offset_ms = (remote_ns - middle_ns) / 1e6;
  }
}

// The scheduled pairs of reachable nodes, on every address of the target, one round at a
// time; the rendezvous node is the first reachable one.
void probe_pairs(ClusterSession& session, const PingOptions& options, PingReport& report,
                 const std::vector<int>& interrupts) {
  std::vector<int> reachable;
  for (size_t i = 0; i < report.nodes.size(); ++i)
    if (session.usable(i)) reachable.push_back(int(i));
  const int n = int(reachable.size());
  const auto rounds = options.pairs == PairSchedule::Every ? tournament_rounds(n) : rendezvous_rounds(n);
  for (const auto& round : rounds) {
    std::vector<std::pair<size_t, std::string>> asks;
    std::vector<std::pair<int, int>> pairs;
    for (auto [a, b] : round) {
      int src = reachable[size_t(a)], dst = reachable[size_t(b)];
      const NodeHello& target = *report.nodes[size_t(dst)].facts;
      nlohmann::json targets = nlohmann::json::array();
      for (const auto& addr : target.addresses)
        targets.push_back({{"address", addr.address}, {"port", target.probe_port},
                           {"secret", target.probe_secret}});
      nlohmann::json ask = {{"op", "probe"}, {"targets", targets}, {"count", options.round_trips},
                            {"timeout_ms", options.timeout.count()},
                            {"bulk_ms", options.bandwidth ? options.bulk.count() : 0}};
      asks.emplace_back(size_t(src), json_text(ask));
      pairs.emplace_back(src, dst);
    }
    auto answers = session.ask(asks, milliseconds(60000), interrupts);
    for (size_t k = 0; k < pairs.size(); ++k) {
      auto [src, dst] = pairs[k];
      const NodeHello& target = *report.nodes[size_t(dst)].facts;
      nlohmann::json results = parse_untrusted_json_or_discarded(answers[k].payload.value_or(""));
      if (!results.is_array()) results = nlohmann::json::array();  // the node could not probe
      for (size_t a = 0; a < target.addresses.size(); ++a) {
        PairProbe p{src, dst, target.addresses[a].address, target.addresses[a].interface, {}};
        p.result.error = "the probing node did not answer";
        if (a < results.size()) {
          try {
            const auto& r = results[a];
            p.result.error = r.at("error");
            p.result.rtt = {r.at("rtt_us").at("min"), r.at("rtt_us").at("median"),
                            r.at("rtt_us").at("p99"), r.at("rtt_us").at("samples")};
            if (r.contains("gbps")) p.result.gbps = r.at("gbps").get<double>();
            p.result.reachable = r.at("reachable");
          } catch (const nlohmann::json::exception& e) {
            p.result = {};
            p.result.error = std::string("the probing node's answer was malformed: ") + e.what();
          }
        }
        report.pairs.push_back(std::move(p));
      }
    }
    if (options.on_round_done) options.on_round_done();
  }
}

// The rendezvous lives on the first node reached (node 0 whenever it answers).
void choose_rendezvous(const ClusterSpec& cluster, PingReport& report) {
  std::vector<int> reachable;
  for (size_t i = 0; i < report.nodes.size(); ++i)
    if (report.nodes[i].facts) reachable.push_back(int(i));
  if (reachable.empty()) return;
  report.rendezvous_node = reachable.front();
  std::map<int, int> index_of;
  std::vector<std::vector<LocalAddress>> addresses;
  for (size_t k = 0; k < reachable.size(); ++k) {
    index_of[reachable[k]] = int(k);
    addresses.push_back(report.nodes[size_t(reachable[k])].facts->addresses);
  }
  // Renumbered to the reachable nodes only when some were not: the probes can number n^2.
  std::vector<PairProbe> renumbered;
  const bool all_reached = reachable.size() == report.nodes.size();
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

  for (const auto& p : in.pairs)
    if (!p.result.reachable)
      add(report, Severity::Fail, FindingKind::Pair, p.src,
          fmt::format("{} cannot reach {} at {} ({}): {}", host(p.src), host(p.dst), p.address,
                      p.interface, p.result.error));

  const int n = int(nodes.size());
  for (const auto& o : rtt_outliers(n, in.pairs, 4.0))
    add(report, Severity::Warn, FindingKind::Rtt, o.node,
        fmt::format("{}: RTT to every peer is {:.0f}x the cluster median", host(o.node), o.ratio));
  for (const auto& o : bandwidth_outliers(n, in.pairs, 0.5))
    add(report, Severity::Warn, FindingKind::Bandwidth, o.node,
        fmt::format("{}: bandwidth to its peers is {:.2f}x the cluster median", host(o.node), o.ratio));

  const CheckThresholds& checks = cluster.checks;
  for (const auto& p : in.pairs) {
    if (!p.result.reachable) continue;
    if (checks.max_rtt_ms && p.result.rtt.median_us / 1000 > *checks.max_rtt_ms)
      add(report, Severity::Fail, FindingKind::Rtt, p.src,
          fmt::format("{} -> {} at {}: median RTT {:.3f} ms is above checks.max_rtt_ms {:g}",
                      host(p.src), host(p.dst), p.address, p.result.rtt.median_us / 1000,
                      *checks.max_rtt_ms));
    if (checks.min_bandwidth_gbps && p.result.gbps && *p.result.gbps < *checks.min_bandwidth_gbps)
      add(report, Severity::Fail, FindingKind::Bandwidth, p.src,
          fmt::format("{} -> {} at {}: {:.2f} Gbit/s is below checks.min_bandwidth_gbps {:g}",
                      host(p.src), host(p.dst), p.address, *p.result.gbps,
                      *checks.min_bandwidth_gbps));
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& node = nodes[i];
    if (node.clock_offset_ms && checks.max_clock_skew_ms &&
        std::abs(*node.clock_offset_ms) > *checks.max_clock_skew_ms)
      add(report, Severity::Fail, FindingKind::Clock, int(i),
          fmt::format("{}: clock is {:+.1f} ms off the head's, beyond checks.max_clock_skew_ms {:g}",
                      node.host, *node.clock_offset_ms, *checks.max_clock_skew_ms));
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

  if (!with_facts.empty() && !in.choice.master_addr)
    add(report, Severity::Fail, FindingKind::Rendezvous, in.rendezvous_node,
        fmt::format("no address of {} was reached by every other node: there is no MASTER_ADDR "
                    "every rank could use", host(in.rendezvous_node)));
  else if (in.choice.master_addr && in.choice.subnet.empty() && with_facts.size() > 1)
    add(report, Severity::Warn, FindingKind::Interfaces, std::nullopt,
        "no single subnet joins every node: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME are left "
        "to the frameworks");
  return report;
}

}  // namespace

int probe_rounds(int nodes) { return int(tournament_rounds(nodes).size()); }

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

PingReport ping_here(const ClusterSpec& cluster) {
  PingReport report;
  const NodeHello self = describe_this_node(HwlocTopologySource().load(), 0, "");
  for (const auto& node : cluster.nodes) {
    NodeStatus status;
    status.host = node.host;
    status.address = node.address;
    status.here = true;
    status.reach.ok = true;
    status.clock_offset_ms = 0;  // the head's own clock
    status.facts = self;
    report.nodes.push_back(std::move(status));
  }
  analyze_probes(cluster, report);
  // The ranks rendezvous on loopback and use no socket interface, as run starts them here:
  // nothing about pairs or interfaces applies.
  std::erase_if(report.problems, [](const Finding& f) {
    return f.kind == FindingKind::Rendezvous || f.kind == FindingKind::Interfaces || f.kind == FindingKind::Pair;
  });
  report.choice.master_addr = "127.0.0.1";
  report.choice.interface_of.clear();
  report.choice.subnet.clear();
  return report;
}

PingReport ping_cluster(ClusterSession& session, const ClusterSpec& cluster,
                        const PingOptions& options, const std::vector<int>& interrupt_fds) {
  PingReport report;
  report.bandwidth_measured = options.bandwidth;
  report.schedule = options.pairs;
  // 1. How the head reached each node, and what each node says it is.
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    NodeStatus s{cluster.nodes[i].host, cluster.nodes[i].address, session.reach()[i], {}, {}};
    if (session.usable(i)) s.facts = session.hellos()[i];
    else if (s.reach.ok) s.reach = {false, session.why_unusable(i), s.reach.timings, 0};
    report.nodes.push_back(std::move(s));
  }
  // 2. Clocks, then the scheduled pairs on every address.
  if (options.clocks) measure_clocks(session, report, interrupt_fds);
  probe_pairs(session, options, report, interrupt_fds);
  // 3. The choice those allow, and what is wrong, in plain words.
  analyze_probes(cluster, report);
  return report;
}

void analyze_probes(const ClusterSpec& cluster, PingReport& report) {
  choose_rendezvous(cluster, report);
  report.problems = find_problems(cluster, report);
}

}  // namespace muster
