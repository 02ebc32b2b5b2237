#include "launcher/job/health_check.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "launcher/median.h"
#include "launcher/remote/health_report.h"
#include "topology/health/counter_baseline.h"
#include "topology/health/finish_within.h"
#include "topology/health/gpu_stress.h"
#include "topology/health/node_record.h"
#include "probes/network_report.h"

namespace muster {

namespace {

constexpr const char* kSnapshotHasNoNvml = "a snapshot (--fsroot) has no NVML: this machine's answers are not its GPUs'";

}  // namespace

NodeHealth check_this_node(const std::string& root, const HealthExpectations& file_expect,
                           std::chrono::milliseconds deadline, GpuLibrariesAsked gpus) {
  return gpus == GpuLibrariesAsked::NotForASnapshot
             ? check_node_against_its_record(root, nullptr, file_expect, deadline, kSnapshotHasNoNvml,
                                             health_state_dir())
             : check_node_against_its_record(root, node_gpu_libraries(), file_expect, deadline,
                                             "GPU libraries not asked", health_state_dir());
}

RecordedNode record_this_node(const std::string& root, GpuLibrariesAsked gpus, std::chrono::milliseconds deadline) {
  // Shared with the reading, which outlives this call when NVML hangs.
  std::shared_ptr<GpuLibraries> libraries = gpus == GpuLibrariesAsked::Yes ? node_gpu_libraries() : nullptr;
  const std::string state_dir = health_state_dir();
  auto recorded = finish_within<RecordedNode>(deadline, [=] {
    try {
      return record_node({root, libraries.get(), nullptr, kSnapshotHasNoNvml, state_dir}, state_dir);
    } catch (const std::exception& e) {
      return RecordedNode{false, std::string("the checks could not run: ") + e.what(), {}};
    }
  });
  if (recorded) return std::move(*recorded);
  return {false, fmt::format("the checks did not finish within {:g} s (NVML or a read of the node's files hung): "
                             "nothing recorded; run muster health to see which check hangs",
                             deadline.count() / 1e3), {}};
}

AcceptedCounters accept_this_nodes_counters(const std::string& root, std::chrono::milliseconds deadline) {
  const std::string state_dir = health_state_dir();
  auto accepted = finish_within<AcceptedCounters>(deadline, [=] {
    try {
      return accept_counter_baseline(root, state_dir);
    } catch (const std::exception& e) {
      return AcceptedCounters{false, std::string("the counters could not be read: ") + e.what(), "", 0};
    }
  });
  if (accepted) return std::move(*accepted);
  return {false, fmt::format("reading the node's counters did not finish within {:g} s: nothing accepted; a file "
                             "system or driver stopped answering, look at dmesg", deadline.count() / 1e3), "", 0};
}

namespace {

// How a fact is compared across nodes.
enum class Compared {
  PartsWithinModel,  // a count of parts (GPUs, links, ports): a node can lose them, not grow them
  SameWithinModel,   // a property of the hardware, the same on every node of one model
  SameEverywhere,    // software: one version across the cluster
};

struct ComparedFact {
  const char* what;
  Compared compared;
  std::function<std::string(const NodeSoftware&)> value;
};

const std::vector<ComparedFact>& compared_facts() {
  static const std::vector<ComparedFact> facts = {
      {"NVIDIA GPUs on the PCI bus", Compared::PartsWithinModel,
       [](const NodeSoftware& s) { return std::to_string(s.nvidia_gpus); }},
      {"GPU model", Compared::SameWithinModel, [](const NodeSoftware& s) { return s.gpu_model; }},
      {"active NVLinks", Compared::PartsWithinModel, [](const NodeSoftware& s) { return std::to_string(s.nvlinks); }},
      {"active InfiniBand/RoCE ports", Compared::PartsWithinModel,
       [](const NodeSoftware& s) { return std::to_string(s.ib_ports); }},
      {"IB port rates", Compared::SameWithinModel, [](const NodeSoftware& s) { return s.ib_rates; }},
      {"NVIDIA driver", Compared::SameEverywhere, [](const NodeSoftware& s) { return s.nvidia_driver; }},
      {"CUDA driver", Compared::SameEverywhere, [](const NodeSoftware& s) { return s.cuda_driver; }},
      {"NCCL", Compared::SameEverywhere, [](const NodeSoftware& s) { return s.nccl; }},
      {"NCCL net plugin", Compared::SameEverywhere, [](const NodeSoftware& s) { return s.nccl_net_plugin; }},
      {"kernel", Compared::SameEverywhere, [](const NodeSoftware& s) { return s.kernel; }},
      {"RDMA providers", Compared::SameEverywhere, [](const NodeSoftware& s) { return s.rdma_providers; }},
  };
  return facts;
}

std::string shown(const std::string& value) { return value.empty() ? "none" : value; }

// The model a node is compared within: its DMI make and model, which a node keeps when it
// loses a part; else its GPUs' model (a node that lost one GPU still names the others'); ""
// when neither was read.
std::string model_of(const NodeSoftware& s) {
  return !s.hardware_model.empty() ? s.hardware_model : s.gpu_model;
}

// The nodes in groups of one model each. A node whose model is unknown joins the one group
// there is, else is compared with no one (`unplaced`).
std::map<std::string, std::vector<size_t>> groups_by_model(const std::vector<NodeSoftware>& nodes,
                                                           std::vector<size_t>& unplaced) {
  std::map<std::string, std::vector<size_t>> groups;
  std::vector<size_t> unknown;
  for (size_t k = 0; k < nodes.size(); ++k) {
    const std::string model = model_of(nodes[k]);
    if (model.empty()) unknown.push_back(k);
    else groups[model].push_back(k);
  }
  if (groups.size() <= 1) {
    auto& only = groups.empty() ? groups[""] : groups.begin()->second;
    only.insert(only.end(), unknown.begin(), unknown.end());
    std::sort(only.begin(), only.end());
  } else {
    unplaced = unknown;
  }
  return groups;
}

HealthFinding difference(const ComparedFact& fact, HealthStatus status, const std::string& value,
                         const std::string& expected, std::string expected_from) {
  const bool hardware = fact.compared != Compared::SameEverywhere;
  HealthFinding f;
  f.check = hardware ? "same_hardware" : "same_software";
  f.status = status;
  f.observed = fmt::format("{} {}", fact.what, shown(value));
  f.expected = shown(expected);
  f.expected_from = std::move(expected_from);
  f.remedy = hardware ? "this node lacks a part the others have: check it before it slows every job"
                      : "install the same version as the other nodes; mixed versions hang collectives";
  return f;
}

// `members`: the nodes compared (indices into `values`); `peers`: how they are named;
// `model_unknown`: members placed in the group without a model of their own, which may be
// another machine (a CPU-only node among GPU nodes): they are warned, never failed.
void compare(const ComparedFact& fact, const std::vector<std::string>& values, const std::vector<size_t>& members,
             const std::string& peers, const std::vector<bool>& model_unknown,
             std::vector<std::vector<HealthFinding>>& out) {
  if (fact.compared == Compared::PartsWithinModel) {
    // The most parts a node of this model has is what each should have: the node that lost
    // one is the odd one, even when most lost one. Without a strict majority at that count
    // which node is right is unknown: the others are warned, the one with more never failed.
    long most = 0;
    for (size_t k : members) most = std::max(most, std::atol(values[k].c_str()));
    size_t with_most = 0;
    for (size_t k : members) with_most += std::atol(values[k].c_str()) == most;
    const bool majority = with_most * 2 > members.size();
    for (size_t k : members)
      if (std::atol(values[k].c_str()) < most)
        out[k].push_back(difference(fact, majority && !model_unknown[k] ? HealthStatus::Fail : HealthStatus::Warn,
                                    values[k], std::to_string(most),
                                    fmt::format("{}{}", majority ? "most nodes" + peers
                                                                 : fmt::format("{} of {} nodes{}; no majority to judge by",
                                                                               with_most, members.size(), peers),
                                                model_unknown[k] ? "; its own model is unknown" : "")));
    return;
  }
  std::vector<std::string> group_values;
  for (size_t k : members) group_values.push_back(values[k]);
  const std::vector<bool> odd = differs_from_majority(group_values);
  std::string usual;
  for (size_t j = 0; j < members.size(); ++j)
    if (!odd[j]) usual = group_values[j];
  for (size_t j = 0; j < members.size(); ++j)
    if (odd[j])
      out[members[j]].push_back(difference(
          fact,
          fact.compared == Compared::SameEverywhere || model_unknown[members[j]] ? HealthStatus::Warn
                                                                                 : HealthStatus::Fail,
          group_values[j], usual, "most nodes" + peers));
}

}  // namespace

std::vector<std::vector<HealthFinding>> differences_across_nodes(const std::vector<NodeSoftware>& nodes) {
  std::vector<std::vector<HealthFinding>> out(nodes.size());
  std::vector<size_t> unplaced, everyone(nodes.size());
  for (size_t k = 0; k < nodes.size(); ++k) everyone[k] = k;
  const auto groups = groups_by_model(nodes, unplaced);
  std::vector<bool> model_unknown(nodes.size()), none_unknown(nodes.size());
  for (size_t k = 0; k < nodes.size(); ++k) model_unknown[k] = model_of(nodes[k]).empty();
  for (const auto& fact : compared_facts()) {
    std::vector<std::string> values;
    for (const auto& n : nodes) values.push_back(fact.value(n));
    if (fact.compared == Compared::SameEverywhere) {
      compare(fact, values, everyone, "", none_unknown, out);
      continue;
    }
    // Hardware is compared within one model only: a cluster of two models is not sick.
    for (const auto& [model, members] : groups)
      compare(fact, values, members, groups.size() > 1 ? " of its model (" + model + ")" : "",
              model.empty() ? none_unknown : model_unknown, out);
  }
  for (size_t k : unplaced) {
    HealthFinding f;
    f.check = "same_hardware";
    f.status = HealthStatus::Unknown;
    f.observed = "hardware model unknown (no DMI product name, no GPU model): not compared with its peers";
    f.remedy = "the cluster has several models: read /sys/class/dmi/id/product_name and nvidia-smi on this node";
    out[k].push_back(std::move(f));
  }
  return out;
}

ClusterHealth check_cluster_health(ClusterContext& context, std::chrono::milliseconds limit, bool stress,
                                   const std::optional<std::vector<size_t>>& nodes) {
  ClusterHealth result;
  HealthExpectations expect = context.cluster().expect;
  if (stress) expect.stress.run = true;
  if (context.is_local()) {
    result.nodes.push_back({0, check_this_node(health_root_of_this_node(), expect), ""});
    return result;
  }
  ClusterSession& session = context.session();
  std::vector<size_t> wanted;
  if (nodes) wanted = *nodes;
  else
    for (size_t i = 0; i < session.size(); ++i)
      if (session.usable(i)) wanted.push_back(i);
  const std::string request = health_request_json(expect);
  std::vector<std::pair<size_t, std::string>> asks;
  std::vector<size_t> result_of_ask;  // index in result.nodes
  for (size_t n : wanted) {
    result.nodes.push_back({n, std::nullopt, ""});
    if (session.usable(n)) {
      asks.emplace_back(n, request);
      result_of_ask.push_back(result.nodes.size() - 1);
    } else {
      result.nodes.back().why_not = session.why_unusable(n);
    }
  }
  auto answers = session.ask(asks, limit, context.interrupt_fds());
  for (size_t k = 0; k < asks.size(); ++k) {
    NodeHealthResult& r = result.nodes[result_of_ask[k]];
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
  std::vector<const NodeHealth*> judged(answered.begin(), answered.end());
  auto slow = stress_across_nodes(judged, expect.stress.peer_ratio);
  for (size_t k = 0; k < answered.size(); ++k)
    for (auto& f : slow[k]) answered[k]->findings.push_back(std::move(f));
  return result;
}

std::vector<std::vector<HealthFinding>> stress_across_nodes(const std::vector<const NodeHealth*>& nodes,
                                                            double peer_ratio) {
  // Every figure of the stress tests that passed on its node, grouped by the GPU model it was
  // measured on, the figure and (for a pair) its NVLinks: a node whose GPUs are all slow
  // alike passes on its own, and only the cluster shows it.
  struct Seen {
    size_t node;
    const HealthFinding* finding;
    double value;
  };
  std::map<std::tuple<std::string, const StressFigureKey*, double>, std::vector<Seen>> groups;
  for (size_t k = 0; k < nodes.size(); ++k)
    for (const auto& f : nodes[k]->findings) {
      if (f.status != HealthStatus::Pass) continue;
      const auto links = f.values.find(kStressNvlinksKey);
      for (const StressFigureKey& figure : kStressFigures) {
        if (f.check != figure.check) continue;
        if (const auto value = f.values.find(figure.key); value != f.values.end())
          groups[{f.gpu_model, &figure, links == f.values.end() ? -1 : links->second}].push_back({k, &f, value->second});
      }
    }
  std::vector<std::vector<HealthFinding>> out(nodes.size());
  for (const auto& [group, seen] : groups) {
    const auto& [model, figure, links] = group;
    std::set<size_t> on;
    for (const auto& s : seen) on.insert(s.node);
    if (on.size() < 3) continue;  // two nodes cannot say which one is slow
    std::vector<double> values;
    for (const auto& s : seen) values.push_back(s.value);
    const double middle = median(values);
    for (const auto& s : seen) {
      if (s.value >= peer_ratio * middle) continue;
      HealthFinding f;
      f.check = s.finding->check;
      f.status = HealthStatus::Fail;
      f.device = s.finding->device;
      f.gpu_model = model;
      f.observed = stress_figure_text(figure->what, figure->unit, s.value);
      f.expected = fmt::format("at least {:.1f} {}", peer_ratio * middle, figure->unit);
      f.expected_from = fmt::format("{:g}x the median of {} figures of {} GPUs across {} nodes (checks.stress_peer_ratio)",
                                    peer_ratio, values.size(), model.empty() ? "its" : model, on.size());
      f.remedy = "this node's GPUs are slow alike, or this one is: compare its clocks, power caps and links with a "
                 "healthy node's";
      f.values[figure->key] = s.value;
      out[s.node].push_back(std::move(f));
    }
  }
  return out;
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
