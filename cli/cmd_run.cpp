// muster run: start the planned ranks, stream their output, and report how the job ended.
#include <cmath>
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/cluster_input.h"
#include "cli/commands.h"
#include "cli/terminal_output.h"
#include "launcher/error.h"
#include "launcher/hostfile.h"
#include "launcher/job_id.h"
#include "launcher/local_gpus.h"
#include "launcher/node_launch.h"
#include "launcher/posix_spawner.h"
#include "launcher/shutdown_signals.h"
#include "probes/free_port.h"
#include "topology/cpu_list.h"
#include "topology/topology_source.h"

namespace muster::cli {

struct RunOptions {
  ClusterInputOptions cluster;
  std::vector<std::string> command;
  std::vector<std::string> exports;
  std::string tag = "rank";
  std::string bind = "core";
  bool report_bindings = false;
  double grace_s = 3;
  double timeout_s = 0;
};

namespace {

Milliseconds seconds_to_ms(double s) { return Milliseconds(std::llround(s * 1000)); }

TagStyle tag_style_of(const std::string& tag) {
  if (tag == "none") return TagStyle::None;
  if (tag == "host") return TagStyle::Host;
  if (tag == "host-rank") return TagStyle::HostRank;
  return TagStyle::Rank;
}

// Multi-node launch needs the SSH transport; until then only this machine can run ranks.
void require_this_machine(const ClusterSpec& cluster, const RankPlan& plan) {
  for (const auto& node : plan.nodes)
    if (!node.ranks.empty() && !is_this_machine(cluster.nodes[size_t(node.node_rank)].address))
      throw Error(ErrorKind::Usage,
                  fmt::format("node '{}' is another machine, and this muster can start ranks "
                              "only on this one (launching over SSH is not built yet); run on "
                              "'localhost' or use -n", node.host));
}

BindPolicy bind_policy_of(const std::string& bind) {
  if (bind == "none") return BindPolicy::None;
  if (bind == "numa") return BindPolicy::Numa;
  return BindPolicy::Core;
}

// Like mpirun --report-bindings: one line per rank, before the ranks start.
void report_bindings(const std::vector<RankProcess>& ranks, const Topology& topology,
                     const RankPlan& plan) {
  for (const auto& r : ranks) {
    const RankBinding& b = r.binding;
    std::string gpu = b.gpu ? fmt::format("GPU {} ({})", *b.gpu,
                                          topology.gpus[size_t(*b.gpu)].location.bus_id)
                            : std::string("no GPU");
    std::string numa = b.numa ? fmt::format("NUMA {}", *b.numa) : std::string("NUMA -");
    print_note(fmt::format("rank {} ({}) bound to CPUs {} ({}), {}", r.rank,
                           plan.ranks[size_t(r.rank)].host,
                           b.cpus.empty() ? std::string("(not bound)") : format_cpu_list(b.cpus),
                           numa, gpu));
  }
}

std::string describe_rank(const RankPlan& plan, int rank) {
  return fmt::format("rank {} ({})", rank, plan.ranks.at(size_t(rank)).host);
}

void report(const JobResult& result, const RankPlan& plan, const RunOptions& options) {
  int stopped = 0;
  for (const auto& r : result.ranks) stopped += r.stopped_by_teardown;
  const std::string others = fmt::format("stopped {} other rank{}", stopped, stopped == 1 ? "" : "s");
  switch (result.end) {
    case JobEnd::Completed: break;
    case JobEnd::RankFailed:
      for (const auto& r : result.ranks)
        if (r.rank == result.first_failed_rank && r.status)
          print_note(fmt::format("{} {}; {}", describe_rank(plan, r.rank), r.status->describe(),
                                 others));
      break;
    case JobEnd::StartFailed:
      print_note(fmt::format("{} could not start: {}; {}",
                             describe_rank(plan, result.first_failed_rank.value_or(0)),
                             result.start_error, others));
      break;
    case JobEnd::Interrupted:
      print_note(fmt::format("interrupted by SIG{}; {} rank{}", sigabbrev_np(result.received_signal),
                             stopped ? fmt::format("stopped {}", stopped) : "no running",
                             stopped == 1 ? "" : "s"));
      break;
    case JobEnd::TimedOut:
      print_note(fmt::format("the job ran past --timeout {}s; stopped {} rank{}",
                             options.timeout_s, stopped, stopped == 1 ? "" : "s"));
      break;
  }
  if (result.escaped_killed > 0)
    print_warning(fmt::format("found {} process{} of this job outside its ranks' process "
                              "groups (MUSTER_JOB_ID) and stopped {}",
                              result.escaped_killed, result.escaped_killed == 1 ? "" : "es",
                              result.escaped_killed == 1 ? "it" : "them"));
  for (const auto& s : result.stuck)
    print_warning(fmt::format("{}{} would not die after SIGKILL; muster exits without it",
                              s.description,
                              s.rank >= 0 ? fmt::format(" of rank {}", s.rank) : std::string()));
}

int run_job(const RunOptions& options) {
  // 1. Which cluster, what this machine is made of, and which rank runs where.
  ClusterSpec cluster = load_cluster(options.cluster);
  HwlocTopologySource this_machine;
  std::optional<Topology> topology = learn_local_gpus(cluster, this_machine);
  RankPlan plan = make_rank_plan(cluster, options.cluster.ranks, map_by_of(options.cluster));
  require_this_machine(cluster, plan);  // so `topology` is set: every rank runs here

  // 2. Everything a rank will see, checked before anything starts.
  const Environment muster_env = Environment::current();
  LaunchRequest request;
  request.argv = options.command;
  request.workdir = cluster.launch.workdir;
  request.job.exports = resolve_exports(options.exports, muster_env);
  request.job.launch_env = cluster.launch.env;
  if (!find_program(options.command.front(), muster_env))
    throw Error(ErrorKind::Usage, fmt::format("'{}': command not found in PATH",
                                              options.command.front()));
  request.job.job_id = new_job_id();
  request.job.master_addr = "127.0.0.1";  // every rank is on this machine
  request.job.master_port = find_free_tcp_port();
  request.job.jax_coordinator_port = find_free_tcp_port();
  request.bind = bind_policy_of(options.bind);
  std::vector<RankProcess> ranks = rank_processes_for_node(plan, 0, request, muster_env, *topology);
  if (options.report_bindings) report_bindings(ranks, *topology, plan);

  // 3. Start the ranks and supervise them until every one has ended.
  TeardownPolicy policy;
  policy.grace = seconds_to_ms(options.grace_s);
  if (options.timeout_s > 0) policy.timeout = seconds_to_ms(options.timeout_s);
  std::vector<std::string> hosts;
  for (const auto& r : plan.ranks) hosts.push_back(r.host);
  TaggedOutput output(tag_style_of(options.tag), hosts);
  ShutdownSignals signals;
  PosixSpawner spawner;
  JobResult result = run_local_job(spawner, ranks, policy, output, signals.fd(),
                                   request.job.job_id);

  // 4. Say how it ended.
  output.flush();
  report(result, plan, options);
  return result.exit_code();
}

}  // namespace

CommandAction setup_run(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  add_cluster_input_options(app, options->cluster);
  app.add_option("-x,--export", options->exports,
                 "add VAR=VALUE (or VAR, copied from muster's environment) to every rank")
      ->allow_extra_args(false);
  app.add_option("--tag", options->tag, "prefix of each output line")
      ->check(CLI::IsMember({"none", "rank", "host", "host-rank"}))
      ->capture_default_str();
  app.add_option("--bind", options->bind,
                 "core: each rank its share of the cores near its GPU (or of a NUMA node); "
                 "numa: the whole NUMA node; none")
      ->check(CLI::IsMember({"none", "numa", "core"}))
      ->capture_default_str();
  app.add_flag("--report-bindings", options->report_bindings,
               "print each rank's CPUs, NUMA node and GPU before starting");
  app.add_option("--grace", options->grace_s,
                 "seconds between SIGTERM and SIGKILL when tearing the job down")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--timeout", options->timeout_s, "stop the job after this many seconds (0: never)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("command", options->command, "the command each rank runs, after --")
      ->required();
  app.footer("Example: muster run -n 4 -- python3 train.py --epochs 1\n"
             "Exit status: 0 when every rank exits 0; else the first failed rank's status "
             "(128+N for signal N); 124 on --timeout; 2 for usage or configuration errors.");
  return [options]() { return run_job(*options); };
}

}  // namespace muster::cli
