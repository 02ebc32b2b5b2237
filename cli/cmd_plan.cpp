// muster plan: which rank runs where, as a table or --json.
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cluster_input.h"
#include "cli/commands.h"
#include "cli/terminal_output.h"
#include "launcher/cluster/rank_plan.h"
#include "launcher/cluster/cluster_input.h"
#include "launcher/cluster/local_gpus.h"
#include "topology/topology_source.h"
#include "launcher/text_bytes.h"

namespace muster::cli {

struct PlanOptions {
  ClusterInput cluster;
  bool json = false;
};

namespace {

nlohmann::json plan_json(const RankPlan& plan, const ClusterInput& input) {
  nlohmann::json j = rank_plan_json(plan);
  j["world_size"] = plan.world_size();
  j["map_by"] = input.map_by == MapBy::Node ? "node" : "slot";
  return j;
}

std::string plan_table(const RankPlan& plan, const ClusterSpec& cluster,
                       const ClusterInput& input) {
  std::string out = fmt::format("cluster: {} ({} node{}), world size {}, map-by {}\n\n",
                                cluster.name.empty() ? cluster.source : cluster.name,
                                plan.nodes.size(), plan.nodes.size() == 1 ? "" : "s",
                                plan.world_size(), input.map_by == MapBy::Node ? "node" : "slot");
  size_t width = 4;
  for (const auto& n : plan.nodes) width = std::max(width, n.host.size());
  out += fmt::format("{:<6}{:<{}}  {:<6}{:<6}{:<6}{}\n", "NODE", "HOST", width, "SLOTS", "RANK",
                     "LOCAL", "GPU");
  for (const auto& n : plan.nodes) {
    if (n.ranks.empty())
      out += fmt::format("{:<6}{:<{}}  {:<6}{}\n", n.node_rank, n.host, width, n.slots, "-");
    for (int rank : n.ranks) {
      const auto& r = plan.ranks[size_t(rank)];
      out += fmt::format("{:<6}{:<{}}  {:<6}{:<6}{:<6}{}\n", n.node_rank, n.host, width, n.slots,
                         r.rank, r.local_rank, r.gpu ? std::to_string(*r.gpu) : std::string("-"));
    }
  }
  return out;
}

}  // namespace

CommandAction setup_plan(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  add_cluster_input_options(app, options->cluster);
  app.add_flag("--json", options->json, "print the plan as JSON");
  return [options]() {
    ClusterSpec cluster = load_cluster(options->cluster);
    HwlocTopologySource this_machine;
    const auto machine = learn_local_gpus(cluster, this_machine);
    const std::string job_gpus = machine ? job_gpus_summary(machine->job, machine->all_gpus) : "";
    RankPlan plan = make_rank_plan(cluster, options->cluster.ranks, options->cluster.map_by);
    if (options->json) {
      nlohmann::json j = plan_json(plan, options->cluster);
      if (machine)
        j["this_machine_gpus"] = {{"job", machine->job.gpus}, {"all", machine->all_gpus},
                                  {"source", machine->job.source}, {"summary", job_gpus}};
      print_out(report_json_text(j, 2) + "\n");
    } else {
      print_out(plan_table(plan, cluster, options->cluster));
      if (!job_gpus.empty()) print_out("\nthis machine: " + job_gpus + "\n");
    }
    return 0;
  };
}

}  // namespace muster::cli
