#include "launcher/job/health_check.h"

#include <functional>

#include <fmt/format.h>

#include "launcher/remote/health_report.h"
#include "topology/health/counter_baseline.h"
#include "probes/network_report.h"

namespace muster {

NodeHealth check_this_node(const std::string& root, const HealthExpectations& expect,
                           std::chrono::milliseconds deadline, GpuLibrariesAsked gpus) {
  if (gpus == GpuLibrariesAsked::NotForASnapshot)
    return check_node_health_within(root, nullptr, expect, deadline,
                                    "a snapshot (--fsroot) has no NVML: this machine's answers are not its GPUs'",
                                    health_state_dir());
  return check_node_health_within(root, node_gpu_libraries(), expect, deadline, "GPU libraries not asked",
                                  health_state_dir());
}

namespace {

struct ComparedFact {
  const char* what;
  bool hardware;  // a missing part (a failure), not another version (a warning)
  std::function<std::string(const NodeSoftware&)> value;
};

const std::vector<ComparedFact>& compared_facts() {
  static const std::vector<ComparedFact> facts = {
      {"NVIDIA GPUs on the PCI bus", true, [](const NodeSoftware& s) { return std::to_string(s.nvidia_gpus); }},
      {"GPU model", true, [](const NodeSoftware& s) { return s.gpu_model; }},
      {"active NVLinks", true, [](const NodeSoftware& s) { return std::to_string(s.nvlinks); }},
      {"active InfiniBand/RoCE ports", true, [](const NodeSoftware& s) { return std::to_string(s.ib_ports); }},
      {"IB port rates", true, [](const NodeSoftware& s) { return s.ib_rates; }},
      {"NVIDIA driver", false, [](const NodeSoftware& s) { return s.nvidia_driver; }},
      {"CUDA driver", false, [](const NodeSoftware& s) { return s.cuda_driver; }},
      {"NCCL", false, [](const NodeSoftware& s) { return s.nccl; }},
      {"NCCL net plugin", false, [](const NodeSoftware& s) { return s.nccl_net_plugin; }},
      {"kernel", false, [](const NodeSoftware& s) { return s.kernel; }},
      {"RDMA providers", false, [](const NodeSoftware& s) { return s.rdma_providers; }},
  };
  return facts;
}

std::string shown(const std::string& value) { return value.empty() ? "none" : value; }

}  // namespace

std::vector<std::vector<HealthFinding>> differences_across_nodes(const std::vector<NodeSoftware>& nodes) {
  std::vector<std::vector<HealthFinding>> out(nodes.size());
  for (const auto& fact : compared_facts()) {
    std::vector<std::string> values;
    for (const auto& n : nodes) values.push_back(fact.value(n));
    const std::vector<bool> odd = differs_from_majority(values);
    std::string usual;
    for (size_t k = 0; k < values.size(); ++k)
      if (!odd[k]) usual = values[k];
    for (size_t k = 0; k < values.size(); ++k) {
      if (!odd[k]) continue;
      HealthFinding f;
      f.check = fact.hardware ? "same_hardware" : "same_software";
      f.status = fact.hardware ? HealthStatus::Fail : HealthStatus::Warn;
      f.observed = fmt::format("{} {}", fact.what, shown(values[k]));
      f.expected = shown(usual);
      f.expected_from = "most nodes";
      f.remedy = fact.hardware ? "this node lacks a part the others have: check it before it slows every job"
                               : "install the same version as the other nodes; mixed versions hang collectives";
      out[k].push_back(std::move(f));
    }
  }
  return out;
}

ClusterHealth check_cluster_health(ClusterContext& context, std::chrono::milliseconds limit) {
  ClusterHealth result;
  const HealthExpectations& expect = context.cluster().expect;
  if (context.is_local()) {
    result.nodes.push_back({0, check_this_node(health_root_of_this_node(), expect), ""});
    return result;
  }
  ClusterSession& session = context.session();
  std::vector<std::pair<size_t, std::string>> asks;
  for (size_t i = 0; i < session.size(); ++i)
    if (session.usable(i)) asks.emplace_back(i, health_request_json(expect));
  auto answers = session.ask(asks, limit, context.interrupt_fds());
  for (size_t k = 0; k < asks.size(); ++k) {
    NodeHealthResult r{asks[k].first, std::nullopt, ""};
    if (!answers[k].payload) {
      r.hung = session.usable(r.node);
      r.why_not = session.usable(r.node)
                      ? fmt::format("no answer within {:g} s: a check hung on the node (NVML on a wedged GPU, "
                                    "or a file system that does not answer)", limit.count() / 1e3)
                      : session.why_unusable(r.node);
    } else {
      try {
        r.health = node_health_from_json(*answers[k].payload);
      } catch (const std::exception& e) {
        r.why_not = fmt::format("its answer was not a health report ({})", e.what());
      }
    }
    result.nodes.push_back(std::move(r));
  }
  // What only the head sees: the node unlike the others.
  // A node whose checks hung has partial facts: compared, it would look like one without
  // GPUs; its hang is its finding.
  std::vector<NodeSoftware> software;
  std::vector<NodeHealth*> answered;
  for (auto& n : result.nodes)
    if (n.health && n.health->complete) {
      software.push_back(n.health->software);
      answered.push_back(&*n.health);
    }
  auto differences = differences_across_nodes(software);
  for (size_t k = 0; k < answered.size(); ++k)
    for (auto& f : differences[k]) answered[k]->findings.push_back(std::move(f));
  return result;
}

std::vector<std::pair<size_t, HealthFinding>> counters_grown_since(ClusterContext& context,
                                                                   const ClusterHealth& start,
                                                                   std::chrono::milliseconds limit) {
  std::vector<std::pair<size_t, HealthFinding>> out;
  if (context.is_local()) {
    if (!start.nodes.empty() && start.nodes.front().health)
      for (auto& f : counter_growth(start.nodes.front().health->counters,
                                    read_health_counters(health_root_of_this_node())))
        out.emplace_back(0, std::move(f));
    return out;
  }
  ClusterSession& session = context.session();
  std::vector<std::pair<size_t, std::string>> asks;
  std::vector<const NodeHealth*> before;
  for (const auto& n : start.nodes)
    if (n.health && session.usable(n.node) && !n.health->counters.empty()) {
      asks.emplace_back(n.node, R"({"op":"health_counters"})");
      before.push_back(&*n.health);
    }
  if (asks.empty()) return out;
  auto answers = session.ask(asks, limit, context.interrupt_fds());
  for (size_t k = 0; k < asks.size(); ++k) {
    if (!answers[k].payload) continue;
    try {
      for (auto& f : counter_growth(before[k]->counters, counters_from_json(*answers[k].payload)))
        out.emplace_back(asks[k].first, std::move(f));
    } catch (const std::exception&) {
      // An odd answer tells nothing about the links; the start's findings stand.
    }
  }
  return out;
}

}  // namespace muster
