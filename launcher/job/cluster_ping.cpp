// Measuring the network: reach, clocks, RTT and bandwidth between every pair or along
// the pair search, retried on a schedule; network_verdicts.cpp judges what this measured.
#include "launcher/job/cluster_ping.h"
#include "launcher/job/network_verdicts.h"

#include <algorithm>
#include <array>
#include <functional>
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
#include "probes/pair_schedule.h"

namespace muster {
namespace {

using Severity = Finding::Severity;
using std::chrono::milliseconds;

// How many clock exchanges each node gets: the one with the shortest round trip is kept, as
// NTP keeps its best sample, because queueing on a slow or busy link delays one direction
// more than the other and reads as skew.
constexpr int kClockExchanges = 8;

// Samples of a node's CPU shortage kept per pass: one per answer it gives, bounded.
constexpr size_t kMostCpuSamples = 4096;

// How long slow pairs are measured again alone, in all: 32 pairs of 300 ms streams take 15 s.
constexpr milliseconds kRemeasureTime{30000};

// Clock offset of a node: its wall clock against the middle of our request's round trip, from
// the exchange with the shortest round trip; half that round trip bounds the error.
// The exchanges share one deadline, and a node that missed one is not asked again: a node
// that never answers costs the pass 10 s, not 10 s an exchange.
void measure_clocks(ClusterSession& session, PingReport& report, const std::vector<int>& interrupts) {
  std::vector<std::pair<size_t, std::string>> asks;
  for (size_t i = 0; i < report.nodes.size(); ++i)
    if (session.usable(i)) asks.emplace_back(i, R"({"op":"clock"})");
  std::vector<double> best_rtt_ns(report.nodes.size(), -1);
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(10000);
  for (int exchange = 0; exchange < kClockExchanges && !asks.empty(); ++exchange) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left <= milliseconds(0)) break;
    auto answers = session.ask(asks, left, interrupts);
    std::vector<std::pair<size_t, std::string>> answered;
    for (size_t k = 0; k < asks.size(); ++k) {
      const AskAnswer& a = answers[k];
      if (!a.payload) continue;
      answered.push_back(asks[k]);
      auto j = parse_untrusted_json_or_discarded(*a.payload);
      if (!j.is_object() || !j.contains("unix_ns") || !j["unix_ns"].is_number()) continue;  // no offset
      const double rtt_ns = double(std::chrono::duration_cast<std::chrono::nanoseconds>(a.answered - a.sent).count());
      double& best = best_rtt_ns[asks[k].first];
      if (rtt_ns < 0 || (best >= 0 && rtt_ns >= best)) continue;
      best = rtt_ns;
      const double remote_ns = j.at("unix_ns").get<double>();
      const double middle_ns = double(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          (a.sent + (a.answered - a.sent) / 2).time_since_epoch()).count());
      NodeStatus& node = report.nodes[asks[k].first];
      node.clock_offset_ms = (remote_ns - middle_ns) / 1e6;
      node.clock_error_ms = rtt_ns / 2 / 1e6;
    }
    asks = std::move(answered);
  }
}

// What one probe answer says of each address asked about, in the order asked.
std::vector<ProbeResult> parse_probe_answer(const std::optional<std::string>& payload, size_t addresses) {
  std::vector<ProbeResult> out(addresses);
  nlohmann::json results = parse_untrusted_json_or_discarded(payload.value_or(""));
  std::string refused;  // the agent's own words when it could not probe at all
  if (results.is_object() && results.contains("error") && results["error"].is_string())
    refused = "the probing node could not probe: " + results["error"].get<std::string>();
  if (!results.is_array()) results = nlohmann::json::array();
  for (size_t a = 0; a < addresses; ++a) {
    ProbeResult& p = out[a];
    p.error = !payload ? "the probing node did not answer"
              : !refused.empty() ? refused
                                 : "the probing node did not answer for this address";
    if (a >= results.size()) continue;
    try {
      const auto& r = results[a];
      p.error = r.at("error");
      p.rtt = {r.at("rtt_us").at("min"), r.at("rtt_us").at("median"), r.at("rtt_us").at("p99"),
               r.at("rtt_us").at("samples")};
      if (r.contains("gbps")) p.gbps = r.at("gbps").get<double>();
      if (r.contains("starved")) p.starved = r.at("starved").get<std::string>();  // not from old agents
      if (r.contains("dropped")) p.dropped = r.at("dropped").get<std::uint64_t>();
      if (r.contains("cpu_pressure")) p.cpu_pressure = std::clamp(r.at("cpu_pressure").get<double>(), 0.0, 1.0);
      if (r.contains("cpu_stalled_us")) p.cpu_stalled_us = r.at("cpu_stalled_us").get<std::uint64_t>();
      p.reachable = r.at("reachable");
    } catch (const nlohmann::json::exception& e) {
      p = {};
      p.error = std::string("the probing node's answer was malformed: ") + e.what();
    }
  }
  return out;
}

// The scheduled pairs of reachable nodes, on every address of the target: each pair as soon
// as both of its nodes are free, and the addresses a pair did not reach once tried again
// later. The rendezvous node is the first reachable one.
void probe_pairs(ClusterSession& session, const PingOptions& options, PingReport& report,
                 const std::vector<int>& interrupts) {
  std::vector<int> reachable;
  for (size_t i = 0; i < report.nodes.size(); ++i)
    if (session.usable(i)) reachable.push_back(int(i));
  PairScheduler::Limits limits;
  limits.retry_after = options.retry_after;
  PairScheduler scheduler(int(reachable.size()), options.pairs, limits);
  // Per ordered pair of node ranks: one entry per address of the target, kept across attempts.
  std::map<std::pair<int, int>, std::vector<PairProbe>> probes;
  std::vector<std::pair<PairDispatch, std::vector<size_t>>> asked;  // by tag: which addresses
  std::vector<double> asked_at;  // by tag: when, in seconds of the pass
  const auto pass_start = std::chrono::steady_clock::now();
  const auto seconds_of_pass = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - pass_start).count();
  };
  double slowest_rtt_us = 0;  // the largest p99 of a pair measured so far
  const auto stage_timeout = [&](const PairDispatch& d, int src, int dst) {
    if (options.timeout) return *options.timeout * (1 << std::min(d.attempt - 1, 4));
    const auto& reach = session.reach();
    const double command_rtt_ms = std::max(reach[size_t(src)].command_rtt_ms, reach[size_t(dst)].command_rtt_ms);
    return probe_stage_timeout(d.attempt, slowest_rtt_us, command_rtt_ms);
  };
  // One address takes the agent at most its timeout per stage (connecting, the secret, the
  // round trips) and, with bandwidth, a second connection and secret, the stream and the
  // wait for its count (10 s). The ask
  // carries the whole budget, and the agent starts no address past it; the head waits for
  // one address more and then some, so that it gives up only on a node that is stuck, never
  // while the node is still probing (its ends would be free for another pair meanwhile).
  const auto per_address = [&](milliseconds stage) {
    return 3 * stage + (options.bandwidth ? 2 * stage + options.bulk + milliseconds(10000) : milliseconds(0));
  };
  const auto budget_for = [&](size_t addresses, milliseconds stage) {
    return int64_t(addresses) * per_address(stage);
  };
  const auto limit_for = [&](size_t addresses, milliseconds stage) {
    return budget_for(addresses, stage) + per_address(stage) + milliseconds(10000);
  };
  AskFlow flow;
  flow.next = [&] {
    std::vector<AskRequest> out;
    for (bool abandoned = true; abandoned;) {  // a lost node's pairs are settled in one go
      abandoned = false;
      for (const PairDispatch& d : scheduler.next(PairScheduler::Clock::now())) {
        const int src = reachable[size_t(d.src)], dst = reachable[size_t(d.dst)];
        if (!session.usable(size_t(src)) || !session.usable(size_t(dst))) {
          // Lost since the pass began: nothing to measure, and the loss is said of the node
          // itself (see ping_cluster), never as its peers' failure to reach it.
          scheduler.done(d, PairOutcome::Abandoned, PairScheduler::Clock::now());
          probes.erase({src, dst});
          if (options.on_pair_done) options.on_pair_done();
          abandoned = true;
          continue;
        }
        const NodeHello& target = *report.nodes[size_t(dst)].facts;
        auto& entries = probes[{src, dst}];
        if (entries.empty())
          for (const auto& addr : target.addresses) entries.push_back({src, dst, addr.address, addr.interface, {}, 0, {}});
        std::vector<size_t> which;  // what this attempt probes: the addresses not reached yet
        nlohmann::json targets = nlohmann::json::array();
        for (size_t a = 0; a < entries.size(); ++a) {
          if (entries[a].result.reachable) continue;
          which.push_back(a);
          targets.push_back({{"address", entries[a].address}, {"port", target.probe_port},
                             {"secret", target.probe_secret}});
        }
        const milliseconds stage = stage_timeout(d, src, dst);
        nlohmann::json ask = {{"op", "probe"}, {"targets", targets}, {"count", options.round_trips},
                              {"timeout_ms", stage.count()},
                              {"budget_ms", budget_for(which.size(), stage).count()},
                              {"bulk_ms", options.bandwidth ? options.bulk.count() : 0}};
        out.push_back({size_t(src), json_text(ask), limit_for(which.size(), stage), asked.size()});
        asked.emplace_back(d, std::move(which));
        asked_at.push_back(seconds_of_pass());
      }
    }
    return out;
  };
  flow.answered = [&](size_t tag, AskAnswer answer) {
    const auto& [d, which] = asked[tag];
    const int src = reachable[size_t(d.src)], dst = reachable[size_t(d.dst)];
    auto& entries = probes[{src, dst}];
    const auto results = parse_probe_answer(answer.payload, which.size());
    const double answered_at = seconds_of_pass();
    bool all_reached = true, starved = false;
    for (size_t k = 0; k < which.size(); ++k) {
      PairProbe& p = entries[which[k]];
      if (p.attempts > 0 && p.first_error.empty()) p.first_error = p.result.error;
      p.attempts = d.attempt;
      p.result = results[k];
      all_reached &= p.result.reachable;
      starved |= !p.result.starved.empty();
      p.asked_s = asked_at[tag];
      p.answered_s = answered_at;
      NodeStatus& prober = report.nodes[size_t(src)];
      prober.dropped_packets += p.result.dropped;
      if (p.result.cpu_pressure)
        prober.cpu_pressure_peak = std::max(prober.cpu_pressure_peak.value_or(0), *p.result.cpu_pressure);
      if (p.result.cpu_stalled_us && k == 0 && prober.cpu_stall_samples.size() < kMostCpuSamples)
        prober.cpu_stall_samples.emplace_back(answered_at, *p.result.cpu_stalled_us);
      if (p.result.reachable) slowest_rtt_us = std::max(slowest_rtt_us, p.result.rtt.p99_us);
    }
    const PairOutcome outcome = all_reached ? PairOutcome::Reached
                                : !session.usable(size_t(src)) || !session.usable(size_t(dst))
                                    ? PairOutcome::Abandoned
                                : starved ? PairOutcome::Starved
                                          : PairOutcome::Failed;
    const bool settled = scheduler.done(d, outcome, PairScheduler::Clock::now());
    if (!settled) return;
    if (outcome != PairOutcome::Abandoned)
      for (auto& p : entries) report.pairs.push_back(std::move(p));
    probes.erase({src, dst});
    if (options.on_pair_done) options.on_pair_done();
  };
  flow.finished = [&] { return scheduler.finished(); };
  session.ask_stream(flow, interrupts);
}

// One bulk stream to `address` of node `dst`, for `options.bulk`, in a probe ask; the ask
// carries the agent's whole budget (connect, secret, a round trip, the stream's connection).
milliseconds stream_stage(const PingOptions& options) { return options.timeout.value_or(milliseconds(2000)); }
std::string stream_ask(const PingReport& report, int dst, const std::string& address, const PingOptions& options) {
  const NodeHello& target = *report.nodes[size_t(dst)].facts;
  const milliseconds stage = stream_stage(options);
  return json_text(nlohmann::json{
      {"op", "probe"},
      {"targets", {{{"address", address}, {"port", target.probe_port}, {"secret", target.probe_secret}}}},
      {"count", 1}, {"timeout_ms", stage.count()}, {"budget_ms", (5 * stage + options.bulk).count()},
      {"bulk_ms", options.bulk.count()}});
}
// How long the head waits for a stream's answer: the agent's budget and then some.
milliseconds stream_limit(const PingOptions& options) {
  return 5 * stream_stage(options) + options.bulk + milliseconds(10000);
}

// The fastest measured pair on the chosen interfaces that `p`'s sender sent to another peer
// (sending) or its receiver got from another peer (receiving): a control for the link.
const PairProbe* fastest_other_pair(const PingReport& report, const PairProbe& p, bool sending) {
  const PairProbe* best = nullptr;
  for (const auto& q : report.pairs) {
    const bool alike = sending ? q.src == p.src && q.dst != p.dst : q.dst == p.dst && q.src != p.src;
    if (alike && q.result.gbps && on_chosen_interface(report, q) && (!best || *q.result.gbps > *best->result.gbps))
      best = &q;
  }
  return best;
}

// Slow pairs measured again one at a time, with nothing else in flight: on nodes that share
// CPUs or an uplink, a stream beside others can look slow when its link is not. The pairs of
// slow links come first (a link is named on its own pairs alone), then those of slow nodes
// (already named by most of their pairs); at most `options.remeasure_limit` of them.
// A link's pair still slow alone is measured once more, right after its sender streams to
// its fastest other peer and its receiver gets a stream from its fastest other peer: a
// machine busy with something else slows them all, and the link is then judged against what
// its ends could do at that moment, not against the cluster's median.
void remeasure_slow_pairs(ClusterSession& session, const ClusterSpec& cluster, const PingOptions& options,
                          PingReport& report, const std::vector<int>& interrupts) {
  const SlowBandwidth slow = slow_bandwidth_of(cluster, report);
  if (slow.threshold_gbps <= 0) return;
  std::set<std::pair<int, int>> of_links;
  for (const SlowLink& l : slow.links) {
    if (l.a_to_b_gbps) of_links.insert({l.a, l.b});
    if (l.b_to_a_gbps) of_links.insert({l.b, l.a});
  }
  std::set<int> slow_nodes;
  for (const SlowNode& s : slow.nodes) slow_nodes.insert(s.node);
  std::vector<PairProbe*> again;
  for (bool links_first : {true, false})
    for (auto& p : report.pairs) {
      if (int(again.size()) >= options.remeasure_limit) break;
      if (!p.result.gbps || *p.result.gbps >= slow.threshold_gbps || !on_chosen_interface(report, p)) continue;
      const bool of_link = of_links.count({p.src, p.dst}) > 0;
      const bool of_node = slow_nodes.count(p.src) || slow_nodes.count(p.dst);
      if (links_first ? of_link : !of_link && of_node) again.push_back(&p);
    }
  auto usable = [&](const PairProbe& q) { return session.usable(size_t(q.src)) && session.usable(size_t(q.dst)); };
  auto stream_alone = [&](const PairProbe& q) -> std::optional<double> {
    const auto answers = session.ask({{size_t(q.src), stream_ask(report, q.dst, q.address, options)}},
                                     stream_limit(options), interrupts);
    return parse_probe_answer(answers.front().payload, 1).front().gbps;
  };
  auto better = [](std::optional<double> a, std::optional<double> b) {
    return a && b ? std::max(a, b) : a ? a : b;
  };
  // Past this the rest stay as first measured: their links are warnings, not failures.
  const auto stop_at = std::chrono::steady_clock::now() + kRemeasureTime;
  for (PairProbe* p : again) {
    if (std::chrono::steady_clock::now() > stop_at) break;
    if (!usable(*p)) continue;
    p->gbps_alone = stream_alone(*p);
    if (!of_links.count({p->src, p->dst}) || !p->gbps_alone || *p->gbps_alone >= slow.threshold_gbps) continue;
    // The slower of the two ends' controls is the one that bounds what the link could do.
    for (bool sending : {true, false}) {
      const PairProbe* control = fastest_other_pair(report, *p, sending);
      if (!control || !usable(*control)) continue;
      const auto gbps = stream_alone(*control);
      if (gbps && (!p->control_gbps || *gbps < *p->control_gbps)) {
        p->control_gbps = gbps;
        p->control_src = control->src;
        p->control_dst = control->dst;
      }
    }
    p->gbps_alone = better(p->gbps_alone, stream_alone(*p));
  }
}

// The address of `node` that its peers stream to: the one on the chosen interface, else its first.
std::string stream_address(const PingReport& report, int node) {
  const auto& addresses = report.nodes[size_t(node)].facts->addresses;
  const auto chosen = report.choice.interface_of.find(node);
  for (const auto& a : addresses)
    if (chosen != report.choice.interface_of.end() && a.interface == chosen->second) return a.address;
  return addresses.empty() ? std::string() : addresses.front().address;
}

}  // namespace

int probe_pair_count(int nodes) { return int(PairScheduler(nodes, PairSchedule::Every).pairs()); }

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
  if (options.bandwidth) {
    choose_rendezvous(cluster, report);  // links are judged on the interfaces chosen
    remeasure_slow_pairs(session, cluster, options, report, interrupt_fds);
  }
  // A node lost meanwhile is reported as lost, and its pairs are left out of the choice.
  for (size_t i = 0; i < report.nodes.size(); ++i) {
    NodeStatus& s = report.nodes[i];
    if (!s.facts || session.usable(i)) continue;
    s.reach = {false, session.why_unusable(i), s.reach.timings, 0};
    s.facts.reset();
    s.clock_offset_ms.reset();
  }
  excuse_only_what_both_ends_explain(report);
  // 3. The choice those allow, and what is wrong, in plain words.
  analyze_probes(cluster, report);
  return report;
}

CulpritReport search_slow_pairs(ClusterSession& session, const ClusterSpec& cluster, const PingReport& report,
                                const PingOptions& options, const std::vector<int>& interrupt_fds) {
  std::vector<int> searched;  // report's node ranks, by the search's numbering
  for (size_t i = 0; i < report.nodes.size(); ++i)
    if (report.nodes[i].facts && session.usable(i) && !stream_address(report, int(i)).empty())
      searched.push_back(int(i));
  // Both ways at once, one stream each way: what a pair of ranks in a collective does.
  const MeasurePairs measure = [&](const std::vector<std::pair<int, int>>& pairs) {
    std::vector<std::pair<size_t, std::string>> asks;
    for (auto [a, b] : pairs)
      for (auto [src, dst] : {std::pair(searched[size_t(a)], searched[size_t(b)]),
                              std::pair(searched[size_t(b)], searched[size_t(a)])})
        asks.emplace_back(size_t(src), stream_ask(report, dst, stream_address(report, dst), options));
    const auto answers = session.ask(asks, stream_limit(options), interrupt_fds);
    std::vector<std::optional<double>> out;
    for (size_t k = 0; k < pairs.size(); ++k) {
      const ProbeResult there = parse_probe_answer(answers[2 * k].payload, 1).front();
      const ProbeResult back = parse_probe_answer(answers[2 * k + 1].payload, 1).front();
      out.push_back(there.gbps && back.gbps ? std::optional(std::min(*there.gbps, *back.gbps)) : std::nullopt);
    }
    return out;
  };
  CulpritSearchOptions search;
  search.bar = bandwidth_bar(cluster.checks);
  CulpritReport found = find_culprits(int(searched.size()), measure, search);
  // Back to the report's node ranks.
  for (int& node : found.slow_nodes) node = searched[size_t(node)];
  for (int& node : found.unknown) node = searched[size_t(node)];
  for (auto& [a, b] : found.slow_links) a = searched[size_t(a)], b = searched[size_t(b)];
  for (auto& [a, b] : found.unknown_links) a = searched[size_t(a)], b = searched[size_t(b)];
  for (auto& m : found.measured) m.a = searched[size_t(m.a)], m.b = searched[size_t(m.b)];
  return found;
}

}  // namespace muster
