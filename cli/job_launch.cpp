#include "cli/job_launch.h"

#include <algorithm>
#include <unistd.h>

#include <cmath>

#include <fmt/format.h>

#include "cli/terminal_output.h"
#include "launcher/job/cluster_ping.h"
#include "launcher/error.h"
#include "launcher/cluster/hostfile.h"
#include "launcher/cluster/job_id.h"
#include "launcher/cluster/local_gpus.h"
#include "launcher/local/node_launch.h"
#include "launcher/local/posix_spawner.h"
#include "launcher/remote/remote_job.h"
#include "launcher/local/shutdown_signals.h"
#include "probes/free_port.h"
#include "topology/cpu_list.h"
#include "topology/topology_source.h"

namespace muster::cli {
namespace {

Milliseconds seconds_to_ms(double s) { return Milliseconds(std::llround(s * 1000)); }

std::string describe_rank(const RankPlan& plan, int rank) {
  return fmt::format("rank {} ({})", rank, plan.ranks.at(size_t(rank)).host);
}

// What every rank runs and sees, checked before anything starts; the rendezvous is
// filled in by the caller, which knows where rank 0 runs.
LaunchRequest launch_request(const JobLaunchOptions& options, const ClusterSpec& cluster,
                             const Environment& muster_env) {
  LaunchRequest request;
  request.argv = options.command;
  request.workdir = cluster.launch.workdir;
  request.job.exports = resolve_exports(options.exports, muster_env);
  request.job.launch_env = cluster.launch.env;
  request.job.job_id = new_job_id();
  request.bind = options.bind;
  return request;
}

TeardownPolicy teardown_policy(const JobLaunchOptions& options) {
  TeardownPolicy policy;
  policy.grace = seconds_to_ms(options.grace_s);
  if (options.timeout_s > 0) policy.timeout = seconds_to_ms(options.timeout_s);
  return policy;
}

// Every rank on this machine: the local launcher, no SSH. A cluster that names this
// machine twice (localhost and 127.0.0.1) runs both entries' ranks here, which is how a
// duplicated machine shows up in smoke's hellos.
LaunchedJob run_here(const JobLaunchOptions& options, ClusterSpec& cluster,
                     const OutputFactory& make_output) {
  // 1. What this machine is made of, and which rank runs where.
  HwlocTopologySource this_machine;
  Topology topology = *learn_local_gpus(cluster, this_machine);
  LaunchedJob job;
  job.plan = make_rank_plan(cluster, options.cluster.ranks, map_by_of(options.cluster));

  // 2. Everything a rank will see, checked before anything starts.
  const Environment muster_env = Environment::current();
  if (options.command.front() != kMusterSelf && !find_program(options.command.front(), muster_env))
    throw Error(ErrorKind::Usage, fmt::format("'{}': command not found in PATH",
                                              options.command.front()));
  LaunchRequest request = launch_request(options, cluster, muster_env);
  request.job.master_addr = "127.0.0.1";  // every rank is on this machine
  request.job.master_port = find_free_tcp_port();
  request.job.jax_coordinator_port = find_free_tcp_port();
  std::vector<RankProcess> ranks;
  for (const auto& node : job.plan.nodes)
    for (auto& r : rank_processes_for_node(job.plan, node.node_rank, request, muster_env, topology))
      ranks.push_back(std::move(r));

  // 3. Start the ranks and supervise them until every one has ended.
  auto output = make_output(job.plan);
  for (const auto& [rank, report] : binding_reports(ranks, topology)) output->rank_bound(rank, report);
  ShutdownSignals signals;
  PosixSpawner spawner;
  job.result = run_local_job(spawner, ranks, teardown_policy(options), *output, {signals.fd()},
                             {"MUSTER_JOB_ID=" + request.job.job_id});
  output->flush();
  return job;
}

// A Ctrl-C while the nodes were reached and probed: the job ends before any rank starts,
// with the status a signal gives.
bool interrupted_before_start(const ShutdownSignals& signals, JobResult& result) {
  unsigned char signal_number = 0;
  if (read(signals.fd(), &signal_number, 1) != 1) return false;
  result.end = JobEnd::Interrupted;
  result.received_signal = signal_number;
  return true;
}

// Ranks on other machines: an agent per node over SSH.
LaunchedJob run_across_nodes(const JobLaunchOptions& options, ClusterSpec& cluster,
                             const OutputFactory& make_output) {
  // 1. Reach every node: SSH, muster there, an agent that says what the node is.
  const Environment muster_env = Environment::current();
  LaunchRequest request = launch_request(options, cluster, muster_env);
  ShutdownSignals signals;
  auto transport = make_libssh_transport();
  auto remote = RemoteJob::open(*transport, cluster, options.remote.options());

  // 2. Plan with what the nodes reported (slots: auto is each node's GPU count).
  for (size_t i = 0; i < cluster.nodes.size(); ++i)
    cluster.nodes[i].gpu_count = remote->hellos()[i].gpus;
  LaunchedJob job;
  job.plan = make_rank_plan(cluster, options.cluster.ranks, map_by_of(options.cluster));
  if (interrupted_before_start(signals, job.result)) return job;

  // 3. Rank 0's rendezvous and each node's interfaces, chosen from what was measured:
  //    an address of node 0 every node reached, and per node the interface in the subnet
  //    that joins them all. Nothing starts when there is none, or a machine is listed twice.
  PingOptions quick;
  quick.round_trips = 5;
  PingReport network = ping_cluster(*remote, cluster, quick);
  std::vector<std::string> blocking;
  for (const auto& p : network.problems)
    if (p.severity == Problem::Severity::Fail && (p.check == "identity" || p.check == "rendezvous"))
      blocking.push_back(p.message);
  if (!blocking.empty()) {
    blocking.push_back("nothing was started; 'muster ping -f FILE' shows the whole picture");
    throw Error(ErrorKind::Runtime, blocking);
  }
  for (const auto& p : network.problems)
    if (p.check == "pair" || p.check == "interfaces") print_warning(p.message);
  request.job.master_addr = *network.choice.master_addr;
  for (const auto& [node, name] : network.choice.interface_of)
    request.job.node_env[node] = {{"NCCL_SOCKET_IFNAME", "=" + name},
                                  {"GLOO_SOCKET_IFNAME", name}};
  request.job.master_port = remote->hellos().front().free_ports.at(0);
  request.job.jax_coordinator_port = remote->hellos().front().free_ports.at(1);
  if (interrupted_before_start(signals, job.result)) return job;

  // 4. Start every node's ranks and supervise them as one job.
  auto output = make_output(job.plan);
  job.result = remote->run(job.plan, request, teardown_policy(options), *output, {signals.fd()});
  output->flush();
  return job;
}

}  // namespace

LaunchedJob launch_job(const JobLaunchOptions& options, const OutputFactory& make_output) {
  ClusterSpec cluster = load_cluster(options.cluster);
  LaunchedJob job = only_this_machine(cluster) ? run_here(options, cluster, make_output)
                                               : run_across_nodes(options, cluster, make_output);
  job.checks = cluster.checks;
  return job;
}

void report_job_end(const JobResult& result, const RankPlan& plan, double timeout_s) {
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
                             timeout_s, stopped, stopped == 1 ? "" : "s"));
      break;
  }
  if (result.escaped_killed > 0)
    print_warning(fmt::format("found {} process{} of this job outside its ranks' process "
                              "groups (MUSTER_JOB_ID) and stopped {}",
                              result.escaped_killed, result.escaped_killed == 1 ? "" : "es",
                              result.escaped_killed == 1 ? "it" : "them"));
  for (const auto& note : result.notes) print_warning(note);
  for (const auto& s : result.stuck)
    print_warning(fmt::format("{}{} would not die after SIGKILL; muster exits without it",
                              s.description,
                              s.rank >= 0 ? fmt::format(" of rank {}", s.rank) : std::string()));
}

}  // namespace muster::cli
