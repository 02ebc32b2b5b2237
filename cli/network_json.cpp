#include "cli/network_json.h"

#include "launcher/job/finding.h"

namespace muster::cli {
namespace {

// The pair search's rounds, where --search ran (null where it did not).
nlohmann::json search_json(const PingReport& r, const std::optional<CulpritReport>& search) {
  if (!search) return nullptr;
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& m : search->measured)
    pairs.push_back({{"a", r.nodes[size_t(m.a)].host}, {"b", r.nodes[size_t(m.b)].host},
                     {"bandwidth_gbps", m.gbps}, {"round", m.round}});
  const auto hosts = [&](const std::vector<int>& nodes) {
    nlohmann::json out = nlohmann::json::array();
    for (int node : nodes) out.push_back(r.nodes[size_t(node)].host);
    return out;
  };
  return {{"rounds", search->rounds},
          {"typical_gbps", search->typical_gbps},
          {"threshold_gbps", search->threshold_gbps},
          {"cleared", search->cleared},
          {"slow_nodes", hosts(search->slow_nodes)},
          {"unknown", hosts(search->unknown)},
          {"split", search->split},
          {"below_the_fast", hosts(search->below_the_fast)},
          {"pairs", pairs}};
}

}  // namespace

nlohmann::json ping_json(const PingReport& r, const std::optional<CulpritReport>& search) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : r.nodes) {
    nlohmann::json node = {
        {"host", n.host}, {"address", n.address}, {"this_machine", n.here}, {"reachable", n.reach.ok},
        {"error", n.reach.ok ? nlohmann::json(nullptr) : nlohmann::json(n.reach.failure)},
        {"steps_ms", {{"resolve", n.reach.timings.resolve_ms},
                      {"tcp_connect", n.reach.timings.tcp_connect_ms},
                      {"ssh_handshake_auth", n.reach.timings.ssh_ms},
                      {"command_round_trip", n.reach.command_rtt_ms}}},
        {"clock_offset_ms", n.clock_offset_ms ? nlohmann::json(*n.clock_offset_ms) : nlohmann::json(nullptr)},
        {"clock_error_ms", n.clock_offset_ms ? nlohmann::json(n.clock_error_ms) : nlohmann::json(nullptr)}};
    if (n.facts) {
      nlohmann::json addresses = nlohmann::json::array();
      for (const auto& a : n.facts->addresses) {
        addresses.push_back({{"interface", a.interface}, {"address", a.address},
                             {"prefix_length", a.prefix_length}});
        if (a.line_rate_gbps) addresses.back()["line_rate_gbps"] = *a.line_rate_gbps;
      }
      node["facts"] = {{"hostname", n.facts->hostname}, {"machine_id", n.facts->machine_id},
                       {"boot_id", n.facts->boot_id}, {"gpus", n.facts->gpus},
                       {"gpu_models", n.facts->gpu_models}, {"nics", n.facts->nics},
                       {"cpus", n.facts->cpus}, {"memory_bytes", n.facts->memory_bytes},
                       {"kernel", n.facts->kernel}, {"muster_version", n.facts->version},
                       {"addresses", addresses}};
    }
    nodes.push_back(node);
  }
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& p : r.pairs) {
    nlohmann::json pair = {{"src", r.nodes[size_t(p.src)].host}, {"dst", r.nodes[size_t(p.dst)].host},
                           {"address", p.address}, {"interface", p.interface},
                           {"reachable", p.result.reachable}};
    if (p.result.reachable)
      pair["rtt_us"] = {{"min", p.result.rtt.min_us}, {"median", p.result.rtt.median_us},
                        {"p99", p.result.rtt.p99_us}, {"samples", p.result.rtt.samples}};
    else
      pair["error"] = p.result.error;
    if (!p.result.reachable && !p.result.starved.empty()) pair["starved"] = p.result.starved;
    pair["attempts"] = p.attempts;
    if (!p.first_error.empty()) pair["first_error"] = p.first_error;
    if (p.result.gbps) pair["bandwidth_gbps"] = *p.result.gbps;
    if (p.gbps_alone) pair["bandwidth_alone_gbps"] = *p.gbps_alone;
    if (p.control_gbps)
      pair["control"] = {{"src", r.nodes[size_t(p.control_src)].host}, {"dst", r.nodes[size_t(p.control_dst)].host},
                         {"bandwidth_alone_gbps", *p.control_gbps}};
    pairs.push_back(pair);
  }
  nlohmann::json problems = nlohmann::json::array();
  for (const auto& p : r.problems) {
    problems.push_back({{"severity", p.severity == Finding::Severity::Fail ? "fail" : "warn"},
                        {"check", finding_name(p.kind)},
                        {"node", p.node ? nlohmann::json(r.nodes[size_t(*p.node)].host) : nlohmann::json(nullptr)},
                        {"message", p.message}});
    if (p.link)
      problems.back()["link"] = {r.nodes[size_t(p.link->first)].host, r.nodes[size_t(p.link->second)].host};
  }
  nlohmann::json ifnames = nlohmann::json::object();
  for (const auto& [node, name] : r.choice.interface_of) ifnames[r.nodes[size_t(node)].host] = "=" + name;
  return {{"nodes", nodes}, {"pairs", pairs}, {"problems", problems},
          {"choices", {{"master_addr", r.choice.master_addr ? nlohmann::json(*r.choice.master_addr)
                                                            : nlohmann::json(nullptr)},
                       {"master_node", r.nodes.empty() ? nlohmann::json(nullptr)
                                                       : nlohmann::json(r.nodes[size_t(r.rendezvous_node)].host)},
                       {"master_passed_over", r.rendezvous_passed_over
                                                  ? nlohmann::json(r.nodes[size_t(*r.rendezvous_passed_over)].host)
                                                  : nlohmann::json(nullptr)},
                       {"master_on_failed_node", r.rendezvous_on_failed_node},
                       {"subnet", r.choice.subnet},
                       {"nccl_socket_ifname", ifnames}, {"gloo_socket_ifname", ifnames}}},
          {"search", search_json(r, search)},
          {"passed", !r.failed()}};
}

}  // namespace muster::cli
