#include "launcher/job/cluster_ping.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace muster {
namespace {

using Clock = std::chrono::steady_clock;
using Severity = Problem::Severity;

// Clock offset of a node: its wall clock against the middle of our request's round trip.
void measure_clocks(RemoteJob& job, PingReport& report) {
  for (size_t i = 0; i < report.nodes.size(); ++i) {
    if (!report.nodes[i].reach.ok) continue;
    auto before = std::chrono::system_clock::now();
    auto answers = job.ask({{i, R"({"op":"clock"})"}}, std::chrono::seconds(10));
    auto after = std::chrono::system_clock::now();
    if (!answers[0]) continue;
    double remote_ns = nlohmann::json::parse(*answers[0]).at("unix_ns").get<double>();
    double middle_ns = double(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  (before + (after - before) / 2).time_since_epoch()).count());
    report.nodes[i].clock_offset_ms = (remote_ns - middle_ns) / 1e6;
  }
}

// Every ordered pair of reachable nodes, on every address of the target, one round of the
// tournament at a time.
void probe_pairs(RemoteJob& job, const PingOptions& options, PingReport& report) {
  std::vector<int> reachable;
  for (size_t i = 0; i < report.nodes.size(); ++i)
    if (report.nodes[i].reach.ok) reachable.push_back(int(i));
  for (const auto& round : tournament_rounds(int(reachable.size()))) {
    std::vector<std::pair<size_t, std::string>> asks;
    std::vector<std::pair<int, int>> pairs;
    for (auto [a, b] : round) {
      int src = reachable[size_t(a)], dst = reachable[size_t(b)];
      const NodeHello& target = *report.nodes[size_t(dst)].facts;
      nlohmann::json targets = nlohmann::json::array();
      for (const auto& addr : target.addresses)
        targets.push_back({{"address", addr.address}, {"port", target.probe_port}});
      nlohmann::json ask = {{"op", "probe"}, {"targets", targets}, {"count", options.round_trips},
                            {"timeout_ms", options.timeout.count()},
                            {"bulk_ms", options.bandwidth ? options.bulk.count() : 0}};
      asks.emplace_back(size_t(src), ask.dump());
      pairs.emplace_back(src, dst);
    }
    auto answers = job.ask(asks, std::chrono::seconds(60));
    for (size_t k = 0; k < pairs.size(); ++k) {
      auto [src, dst] = pairs[k];
      const NodeHello& target = *report.nodes[size_t(dst)].facts;
      nlohmann::json results = answers[k] ? nlohmann::json::parse(*answers[k]) : nlohmann::json::array();
      for (size_t a = 0; a < target.addresses.size(); ++a) {
        PairProbe p{src, dst, target.addresses[a].address, target.addresses[a].interface, {}};
        if (a < results.size()) {
          const auto& r = results[a];
          p.result.reachable = r.at("reachable");
          p.result.error = r.at("error");
          p.result.rtt = {r.at("rtt_us").at("min"), r.at("rtt_us").at("median"),
                          r.at("rtt_us").at("p99"), r.at("rtt_us").at("samples")};
          if (r.contains("gbps")) p.result.gbps = r.at("gbps").get<double>();
        } else {
          p.result.error = "the probing node did not answer";
        }
        report.pairs.push_back(std::move(p));
      }
    }
    if (options.on_round_done) options.on_round_done();
  }
}

void choose_rendezvous(const ClusterSpec& cluster, PingReport& report) {
  // Chosen among the reachable nodes; node 0 must be one of them.
  std::vector<int> reachable;
  for (size_t i = 0; i < report.nodes.size(); ++i)
    if (report.nodes[i].reach.ok) reachable.push_back(int(i));
  if (reachable.empty() || reachable.front() != 0) return;
  std::map<int, int> index_of;
  std::vector<std::vector<LocalAddress>> addresses;
  for (size_t k = 0; k < reachable.size(); ++k) {
    index_of[reachable[k]] = int(k);
    addresses.push_back(report.nodes[size_t(reachable[k])].facts->addresses);
  }
  std::vector<PairProbe> local;
  for (auto p : report.pairs) {
    p.src = index_of.at(p.src);
    p.dst = index_of.at(p.dst);
    local.push_back(p);
  }
  NetworkChoice choice = choose_network(addresses, local, cluster.nodes.front().address);
  report.choice.master_addr = choice.master_addr;
  report.choice.subnet = choice.subnet;
  for (auto [k, name] : choice.interface_of) report.choice.interface_of[reachable[size_t(k)]] = name;
}

void add(std::vector<Problem>& found, Severity severity, std::string check, std::string message) {
  found.push_back({severity, std::move(check), std::move(message)});
}

std::vector<Problem> find_problems(const ClusterSpec& cluster, const PingReport& in) {
  std::vector<Problem> report;
  const auto& nodes = in.nodes;
  auto host = [&](int i) { return nodes[size_t(i)].host; };
  for (const auto& n : nodes)
    if (!n.reach.ok) add(report, Severity::Fail, "reach", n.reach.failure);

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
        add(report, Severity::Fail, "identity",
            fmt::format("{} are the same machine (same {} {}); list each machine once, or its "
                        "ranks and GPUs would be used twice", fmt::join(names, " and "),
                        std::string(what) == "machine-id" ? "/etc/machine-id" : "boot id", id));
      }
  }

  for (const auto& p : in.pairs)
    if (!p.result.reachable)
      add(report, Severity::Fail, "pair",
          fmt::format("{} cannot reach {} at {} ({}): {}", host(p.src), host(p.dst), p.address,
                      p.interface, p.result.error));

  const int n = int(nodes.size());
  for (const auto& o : rtt_outliers(n, in.pairs, 4.0))
    add(report, Severity::Warn, "rtt",
        fmt::format("{}: RTT to every peer is {:.0f}x the cluster median", host(o.node), o.ratio));
  for (const auto& o : bandwidth_outliers(n, in.pairs, 0.5))
    add(report, Severity::Warn, "bandwidth",
        fmt::format("{}: bandwidth to its peers is {:.2f}x the cluster median", host(o.node), o.ratio));

  const CheckThresholds& checks = cluster.checks;
  for (const auto& p : in.pairs) {
    if (!p.result.reachable) continue;
    if (checks.max_rtt_ms && p.result.rtt.median_us / 1000 > *checks.max_rtt_ms)
      add(report, Severity::Fail, "rtt",
          fmt::format("{} -> {} at {}: median RTT {:.3f} ms is above checks.max_rtt_ms {:g}",
                      host(p.src), host(p.dst), p.address, p.result.rtt.median_us / 1000,
                      *checks.max_rtt_ms));
    if (checks.min_bandwidth_gbps && p.result.gbps && *p.result.gbps < *checks.min_bandwidth_gbps)
      add(report, Severity::Fail, "bandwidth",
          fmt::format("{} -> {} at {}: {:.2f} Gbit/s is below checks.min_bandwidth_gbps {:g}",
                      host(p.src), host(p.dst), p.address, *p.result.gbps,
                      *checks.min_bandwidth_gbps));
  }
  for (const auto& node : nodes)
    if (node.clock_offset_ms && checks.max_clock_skew_ms &&
        std::abs(*node.clock_offset_ms) > *checks.max_clock_skew_ms)
      add(report, Severity::Fail, "clock",
          fmt::format("{}: clock is {:+.1f} ms off the head's, beyond checks.max_clock_skew_ms {:g}",
                      node.host, *node.clock_offset_ms, *checks.max_clock_skew_ms));

  // Facts that set a node apart from the majority: a missing GPU, another kernel.
  struct Fact {
    const char* what;
    std::function<std::string(const NodeHello&)> value;
  };
  const Fact facts[] = {
      {"GPUs", [](const NodeHello& h) {
         return fmt::format("{} ({})", h.gpus, fmt::join(h.gpu_models, ", "));
       }},
      {"NICs", [](const NodeHello& h) { return std::to_string(h.nics); }},
      {"CPUs", [](const NodeHello& h) { return std::to_string(h.cpus); }},
      {"memory", [](const NodeHello& h) {
         return fmt::format("{:.0f} GiB", double(h.memory_bytes) / (1 << 30));
       }},
      {"kernel", [](const NodeHello& h) { return h.kernel; }},
      {"muster", [](const NodeHello& h) { return h.version; }},
  };
  std::vector<int> with_facts;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].facts) with_facts.push_back(int(i));
  for (const auto& fact : facts) {
    std::vector<std::string> values;
    for (int i : with_facts) values.push_back(fact.value(*nodes[size_t(i)].facts));
    auto odd = differs_from_majority(values);
    std::string usual;
    for (size_t k = 0; k < values.size(); ++k)
      if (!odd[k]) usual = values[k];
    for (size_t k = 0; k < values.size(); ++k)
      if (odd[k])
        add(report, Severity::Warn, "facts",
            fmt::format("{}: {} {}, most nodes have {}", host(with_facts[k]), fact.what,
                        values[k], usual));
  }

  if (n > 0 && nodes.front().reach.ok && !in.choice.master_addr)
    add(report, Severity::Fail, "rendezvous",
        fmt::format("no address of {} was reached by every other node: there is no MASTER_ADDR "
                    "every rank could use", host(0)));
  else if (in.choice.master_addr && in.choice.subnet.empty() && n > 1)
    add(report, Severity::Warn, "interfaces",
        "no single subnet joins every node: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME are left "
        "to the frameworks");
  return report;
}

}  // namespace

int probe_rounds(int nodes) { return int(tournament_rounds(nodes).size()); }

bool PingReport::failed() const {
  return std::any_of(problems.begin(), problems.end(),
                     [](const Problem& p) { return p.severity == Severity::Fail; });
}

PingReport ping_cluster(RemoteJob& job, const ClusterSpec& cluster, const PingOptions& options) {
  PingReport report;
  report.bandwidth_measured = options.bandwidth;
  // 1. How the head reached each node, and what each node says it is.
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    NodeStatus s{cluster.nodes[i].host, cluster.nodes[i].address, job.reach()[i], {}, {}};
    if (s.reach.ok) s.facts = job.hellos()[i];
    report.nodes.push_back(std::move(s));
  }
  // 2. Clocks, then every pair on every address, then the choice those allow.
  measure_clocks(job, report);
  probe_pairs(job, options, report);
  choose_rendezvous(cluster, report);
  // 3. What is wrong, in plain words.
  report.problems = find_problems(cluster, report);
  return report;
}

}  // namespace muster
