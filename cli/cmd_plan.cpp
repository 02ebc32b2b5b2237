// muster plan: which rank runs where, as a table or --json.
#include <algorithm>
#include <memory>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cluster_input.h"
#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/terminal_output.h"
#include "launcher/cluster/hostlist.h"
#include "launcher/cluster/rank_plan.h"
#include "launcher/cluster/cluster_input.h"
#include "launcher/cluster/local_gpus.h"
#include "launcher/job/restarts.h"
#include "launcher/local/mpi_world.h"
#include "launcher/text_bytes.h"
#include "topology/topology_source.h"

namespace muster::cli {

struct PlanOptions {
  ClusterInput cluster;
  bool json = false;
  MpiServe mpi = MpiServe::Auto;
  CLI::Option* mpi_flag = nullptr;  // whether --mpi was given: launch.mpi otherwise
  SpareFlags spares;
};

namespace {

// Nodes of `slots: auto` not reached yet: their GPUs, and so their ranks, are known only when
// muster reaches them (run, smoke and doctor do; plan reaches nothing).
std::vector<bool> slots_unknown(const ClusterSpec& cluster) {
  std::vector<bool> unknown;
  for (const auto& node : cluster.nodes) unknown.push_back(node.slots.is_auto() && !node.gpu_count && !node.spare);
  return unknown;
}

// Whether the world size is known now: every node's slots are, or -n fixed it.
bool world_size_known(const ClusterSpec& cluster, const ClusterInput& input) {
  const std::vector<bool> unknown = slots_unknown(cluster);
  return input.ranks || std::find(unknown.begin(), unknown.end(), true) == unknown.end();
}

nlohmann::json plan_json(const RankPlan& plan, const ClusterSpec& cluster, const ClusterInput& input) {
  nlohmann::json j = rank_plan_json(plan);
  j["world_size"] = plan.world_size();
  j["map_by"] = input.map_by == MapBy::Node ? "node" : "slot";
  // Which nodes were planned with one rank for now, and so whether world_size is known.
  const std::vector<bool> unknown = slots_unknown(cluster);
  j["slots_known_when_reached"] = nlohmann::json::array();
  for (size_t i = 0; i < unknown.size(); ++i)
    if (unknown[i]) j["slots_known_when_reached"].push_back(cluster.nodes[i].host);
  j["world_size_known"] = world_size_known(cluster, input);
  j["spares"] = nlohmann::json::array();
  for (const auto& node : cluster.nodes)
    if (node.spare) j["spares"].push_back(node.host);
  return j;
}

std::string plan_table(const RankPlan& plan, const ClusterSpec& cluster,
                       const ClusterInput& input) {
  const std::vector<bool> unknown = slots_unknown(cluster);
  const auto unreached = std::count(unknown.begin(), unknown.end(), true);
  const std::string world =
      world_size_known(cluster, input)
          ? fmt::format("world size {}", plan.world_size())
          : fmt::format("world size known when the nodes are reached (at least {})", plan.world_size());
  std::string out = fmt::format("cluster: {} ({} node{}), {}, map-by {}\n\n",
                                cluster.name.empty() ? cluster.source : cluster.name,
                                plan.nodes.size(), plan.nodes.size() == 1 ? "" : "s", world,
                                input.map_by == MapBy::Node ? "node" : "slot");
  size_t width = 4;
  for (const auto& n : plan.nodes) width = std::max(width, n.host.size());
  out += fmt::format("{:<6}{:<{}}  {:<6}{:<6}{:<6}{}\n", "NODE", "HOST", width, "SLOTS", "RANK",
                     "LOCAL", "GPU");
  for (const auto& n : plan.nodes) {
    if (cluster.nodes[size_t(n.node_rank)].spare) {
      out += fmt::format("{:<6}{:<{}}  {:<6}{}\n", n.node_rank, n.host, width, "spare",
                         "runs a left-out node's ranks after a restart");
      continue;
    }
    if (size_t(n.node_rank) < unknown.size() && unknown[size_t(n.node_rank)]) {
      out += fmt::format("{:<6}{:<{}}  {:<6}{}\n", n.node_rank, n.host, width, "auto",
                         "one rank per GPU, known when reached");
      continue;
    }
    if (n.ranks.empty())
      out += fmt::format("{:<6}{:<{}}  {:<6}{}\n", n.node_rank, n.host, width, n.slots, "-");
    for (int rank : n.ranks) {
      const auto& r = plan.ranks[size_t(rank)];
      out += fmt::format("{:<6}{:<{}}  {:<6}{:<6}{:<6}{}\n", n.node_rank, n.host, width, n.slots,
                         r.rank, r.local_rank, r.gpu ? std::to_string(*r.gpu) : std::string("-"));
    }
  }
  if (unreached > 0)
    out += "\n" + wrap_words(fmt::format("'slots: auto' starts one rank per GPU of a node, which "
                                        "muster learns when it reaches it ('muster run' and "
                                        "'muster doctor' do); the ranks after {} are numbered "
                                        "here as if {} one.",
                                        unreached == 1 ? "that node" : "those nodes",
                                        unreached == 1 ? "it had" : "each had"),
                            80, 0) + "\n";
  return out;
}

}  // namespace

CommandAction setup_plan(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  add_cluster_input_options(app, options->cluster);
  app.add_flag("--json", options->json, "print the plan as JSON");
  add_spare_flags(app, options->spares, "hold the last K nodes back as spares, as for run");
  options->mpi_flag = add_choice(app, "--mpi", options->mpi, mpi_choices(),
                                 "what each rank's MPI library would be served, as for run", "auto");
  return [options]() {
    ClusterSpec cluster = load_cluster(options->cluster);
    if (options->mpi_flag->count() == 0 && cluster.launch.mpi) options->mpi = mpi_choices().at(*cluster.launch.mpi);
    // What `run` offers each rank's MPI library (PMIx needs libpmix2 on every node; the
    // agents' hellos say where it is missing, and run says so before starting).
    const std::string offered = mpi_offer_text(options->mpi);
    HwlocTopologySource this_machine;
    const auto machine = learn_local_gpus(cluster, this_machine);
    const std::string job_gpus = machine ? job_gpus_summary(machine->job, machine->all_gpus) : "";
    hold_spares(cluster, options->spares);
    RankPlan plan = make_rank_plan(cluster, options->cluster.ranks, options->cluster.map_by);
    if (options->json) {
      nlohmann::json j = plan_json(plan, cluster, options->cluster);
      j["mpi_offered"] = offered;
      if (machine)
        j["this_machine_gpus"] = {{"job", machine->job.gpus}, {"all", machine->all_gpus},
                                  {"source", machine->job.source}, {"summary", job_gpus}};
      print_out(report_json_text(j, 2) + "\n");
    } else {
      print_out(plan_table(plan, cluster, options->cluster));
      print_out(fmt::format("\nMPI: each rank is offered {} (--mpi {}), so that an MPI program starts as one "
                            "world\n", offered,
                            [&] {
                              for (const auto& [word, value] : mpi_choices())
                                if (value == options->mpi) return word;
                              return std::string("auto");
                            }()));
      if (!job_gpus.empty()) print_out("\nthis machine: " + job_gpus + "\n");
    }
    return 0;
  };
}

}  // namespace muster::cli
