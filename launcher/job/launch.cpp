#include "launcher/job/launch.h"

#include <unistd.h>

#include <cstring>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "launcher/cluster/hostfile.h"
#include "launcher/cluster/job_id.h"
#include "launcher/cluster/local_gpus.h"
#include "launcher/error.h"
#include "launcher/job/control_socket.h"
#include "launcher/job/health_check.h"
#include "launcher/job/node_drain.h"
#include "launcher/job/restarts.h"
#include "launcher/job/session_job.h"
#include "launcher/job/slurm_job.h"
#include "launcher/json_fields.h"
#include "launcher/local/node_launch.h"
#include "launcher/local/fence_exchange.h"
#include "launcher/local/mpi_world.h"
#include "launcher/local/posix_spawner.h"
#include "launcher/local/rank_libraries.h"
#include "launcher/local/self.h"
#include "probes/free_port.h"
#include "topology/topology_source.h"

namespace muster {
namespace {

Milliseconds seconds_to_ms(double s) { return Milliseconds(std::llround(s * 1000)); }

// What every rank runs and sees, checked before anything starts; the rendezvous is
// filled in by the caller, which knows where rank 0 runs.
// Where muster was started, or nothing when that directory has gone.
std::optional<std::string> caller_directory() {
  std::string dir(4096, '\0');
  if (!getcwd(dir.data(), dir.size())) return std::nullopt;
  dir.resize(dir.find('\0'));
  return dir;
}

// Where the ranks start: a directory that was asked for, or the caller's where it exists.
// muster's own probe ranks start where their agent stands: they read no files of the
// user's, and a caller's directory missing on the nodes is no finding of doctor's.
void choose_workdir(LaunchRequest& request, const JobOptions& options, const ClusterSpec& cluster) {
  const std::optional<std::string> here = caller_directory();
  if (const auto& asked = options.chdir ? options.chdir : cluster.launch.chdir) {
    if (asked->empty())
      throw Error(ErrorKind::Usage, "the directory to start the ranks in is empty; name one, as in "
                                    "--chdir /shared/job");
    request.workdir = asked->front() == '/' || !here ? *asked : *here + "/" + *asked;
    request.workdir_rule = WorkdirRule::Required;
  } else if (options.command.front() != kMusterSelf) {
    request.workdir = here;
    request.workdir_rule = WorkdirRule::OrHome;
  }
}

LaunchRequest launch_request(const JobOptions& options, const ClusterSpec& cluster,
                             const Environment& muster_env) {
  LaunchRequest request;
  request.argv = options.command;
  choose_workdir(request, options, cluster);
  request.job.exports = resolve_exports(options.exports, muster_env);
  request.job.launch_env = cluster.launch.env;
  request.job.job_id = new_job_id();
  request.bind = options.bind;
  return request;
}

// `deadline`: the whole job's --timeout, fixed once when the job began; each attempt gets
// what is left of it.
TeardownPolicy teardown_policy(const JobOptions& options, std::optional<SteadyTime> deadline) {
  TeardownPolicy policy;
  policy.grace = seconds_to_ms(options.grace_s);
  policy.settle = seconds_to_ms(options.settle_s);
  policy.gave_up_exit_code = options.gave_up_exit_code;
  if (deadline)
    policy.timeout = std::max(Milliseconds(1), std::chrono::duration_cast<Milliseconds>(
                                                   *deadline - std::chrono::steady_clock::now()));
  if (options.stall_s > 0) policy.stall = seconds_to_ms(options.stall_s);
  return policy;
}

// What the ranks' MPI library is served, and the job's map it needs: every node of the plan
// that holds ranks, by the name `name_of(node)` it gives itself. Nothing for muster's own
// probe ranks.
std::optional<MpiWorld> mpi_world(const JobOptions& options, const RankPlan& plan, const std::string& job_id,
                                  const std::function<std::string(int node)>& name_of) {
  if (options.mpi == MpiServe::None || options.command.front() == kMusterSelf) return std::nullopt;
  MpiWorld world{options.mpi, job_id, {}, {}};
  std::map<int, int> index_of;  // node rank -> index in world.hosts
  for (const auto& node : plan.nodes)
    if (!node.ranks.empty()) {
      index_of[node.node_rank] = int(world.hosts.size());
      world.hosts.push_back(name_of(node.node_rank));
    }
  for (const auto& r : plan.ranks) world.node_of_rank.push_back(index_of.at(r.node_rank));
  return world;
}

// Two distinct ports that `offer` gives (asked again while it gives one already used) and no
// earlier attempt of the job used: a rank of one may still hold it, or a peer dial it.
std::pair<int, int> ports_no_attempt_used(std::set<int>& used, const std::function<std::pair<int, int>()>& offer,
                                          const std::string& offered_by) {
  for (int tries = 0; tries < 20; ++tries) {
    const auto ports = offer();
    if (ports.first == ports.second || used.count(ports.first) || used.count(ports.second)) continue;
    used.insert(ports.first);
    used.insert(ports.second);
    return ports;
  }
  throw Error(ErrorKind::Runtime,
              fmt::format("{} offered only rendezvous ports an earlier attempt of the job used", offered_by));
}

// `muster stacks` reaching a job on this machine alone, at the same socket as across nodes.
class ControlSocketRequests : public StacksRequests {
 public:
  ControlSocketRequests(const std::string& job_id, JobListing listing) : socket_(job_id, std::move(listing)) {}
  std::optional<int> take() override { return socket_.take_stacks_request(); }
  void answer(int client, const std::string& report_json) override { JobControlSocket::answer(client, report_json); }

 private:
  JobControlSocket socket_;
};

// Every rank on this machine: the local launcher, no SSH. A cluster that names this
// machine twice (localhost and 127.0.0.1) runs both entries' ranks here, which is how a
// duplicated machine shows up in smoke's hellos.
LaunchedJob run_here(ClusterContext& context, const JobOptions& options, const OutputFactory& make_output,
                     int restart_count, std::optional<SteadyTime> deadline, std::set<int>& used_ports) {
  // 1. What this machine is made of, and which rank runs where.
  ClusterSpec& cluster = context.cluster();
  HwlocTopologySource this_machine;
  Topology topology = learn_local_gpus(cluster, this_machine)->topology;
  LaunchedJob job;
  job.plan = make_rank_plan(cluster, options.ranks, options.map_by);

  // 2. Everything a rank will see, checked before anything starts.
  const Environment muster_env = node_environment();
  if (options.command.front() != kMusterSelf) check_command_runs(options.command.front(), muster_env);
  LaunchRequest request = launch_request(options, cluster, muster_env);
  request.job.master_addr = "127.0.0.1";  // every rank is on this machine
  request.job.restart_count = restart_count;
  std::tie(request.job.master_port, request.job.jax_coordinator_port) = ports_no_attempt_used(
      used_ports, [] { return std::pair(find_free_tcp_port(), find_free_tcp_port()); }, "this machine");
  std::vector<RankProcess> ranks;
  for (const auto& node : job.plan.nodes)
    for (auto& r : rank_processes_for_node(node_view(job.plan, node.node_rank), request, muster_env, topology))
      ranks.push_back(std::move(r));

  // 3. Start the ranks and supervise them until every one has ended, serving their MPI.
  auto output = make_output(job.plan);
  for (const auto& [rank, report] : binding_reports(ranks, topology)) output->rank_bound(rank, report);
  // This machine is one node to MPI, however many entries of the cluster name it.
  std::optional<MpiWorld> world = mpi_world(options, job.plan, request.job.job_id, [](int) { return this_hostname(); });
  if (world) std::fill(world->node_of_rank.begin(), world->node_of_rank.end(), 0), world->hosts.resize(1);
  OneNodeExchange exchange;
  std::vector<std::string> warnings;
  std::unique_ptr<RankService> mpi = world ? serve_mpi(*world, 0, exchange, warnings) : nullptr;
  for (const auto& warning : warnings) output->launch_warning(warning);
  PosixSpawner spawner;
  TeardownPolicy policy = teardown_policy(options, deadline);
  policy.read_stacks = true;  // the ranks are this process's children: it reads them itself
  policy.dumps_dir = flight_recorder_dir(request.job.job_id);
  std::unique_ptr<ControlSocketRequests> stacks_requests;
  try {
    stacks_requests = std::make_unique<ControlSocketRequests>(
        request.job.job_id, job_listing(options.command, job.plan.world_size(), {this_hostname()}));
  } catch (const Error& e) {
    output->launch_warning(fmt::format("'muster stacks' cannot reach this job: {}", e.what()));
  }
  job.result = run_local_job(spawner, ranks, policy, *output, context.interrupt_fds(),
                             {"MUSTER_JOB_ID=" + request.job.job_id}, mpi.get(), stacks_requests.get());
  output->flush();
  return job;
}

// Attempts on this machine alone: there is no other node to move to, so every restart is in
// place.
class LocalAttempts : public AttemptRunner {
 public:
  LocalAttempts(ClusterContext& context, const JobOptions& options, const OutputFactory& make_output)
      : context_(context), options_(options), make_output_(make_output) {}
  AttemptEnd run_attempt(int number, const std::vector<size_t>&, std::optional<SteadyTime> deadline) override {
    // When the ranks ran and the failure was seen are left unset: the local launcher does not
    // say, and the timeline prints no time it did not measure.
    AttemptEnd end;
    job = run_here(context_, options_, make_output_, number, deadline, used_ports_);
    end.result = job.result;
    end.ended_by = describe_job_end(job.result, job.plan, options_.timeout_s);
    return end;
  }
  std::map<size_t, std::string> check_nodes(const std::vector<size_t>&) override { return {}; }
  std::string leave_out(size_t, const std::string&) override { return ""; }
  std::string host(size_t node) const override { return context_.cluster().nodes[node].host; }
  LaunchedJob job;  // the last attempt's

 private:
  ClusterContext& context_;
  const JobOptions& options_;
  const OutputFactory& make_output_;
  std::set<int> used_ports_;
};

// Two ports free on the node that serves the rendezvous, asked for now: a port free when
// the node said hello may have been taken since.
std::pair<int, int> rendezvous_ports(ClusterContext& context, int node) {
  ClusterSession& session = context.session();
  auto answers = session.ask({{size_t(node), R"({"op":"ports"})"}}, std::chrono::seconds(10),
                             context.interrupt_fds());
  auto j = parse_untrusted_json_or_discarded(answers[0].payload.value_or("{}"));
  auto is_port = [](const nlohmann::json& p) {
    return p.is_number_unsigned() && p.get<std::uint64_t>() >= 1 && p.get<std::uint64_t>() <= 65535;
  };
  if (!j.is_object() || !j.contains("ports") || !j["ports"].is_array() || j["ports"].size() < 2 ||
      !is_port(j["ports"][0]) || !is_port(j["ports"][1]))
    throw Error(ErrorKind::Runtime,
                fmt::format("{} did not say which ports are free for the rendezvous: {}",
                            context.cluster().nodes[size_t(node)].host,
                            session.usable(size_t(node)) ? "no answer" : session.why_unusable(size_t(node))));
  return {j["ports"][0].get<int>(), j["ports"][1].get<int>()};
}

// PMIx is served on every node of the job or on none: a node without it would start its Open
// MPI ranks as worlds of one, and the others would wait for them at their first fence. With
// --mpi pmix that is an error; with auto, PMI-1 alone is served, and the warnings say why.
// PMIx also tells nodes apart by the names they give themselves: two that give the same
// name (cloned machines) would each count the other's ranks as their own.
std::vector<std::string> check_pmix_on_every_node(ClusterContext& context, const RankPlan& plan, MpiWorld& world) {
  if (world.serve == MpiServe::Pmi1) return {};
  std::vector<std::string> lacking;
  std::map<std::string, std::string> first_named;  // a node's own name -> its host in the cluster
  for (const auto& node : plan.nodes) {
    if (node.ranks.empty()) continue;
    const std::string& host = context.session().host(size_t(node.node_rank));
    const NodeHello& hello = context.session().hellos()[size_t(node.node_rank)];
    if (!hello.pmix_unavailable.empty()) lacking.push_back(fmt::format("{}: {}", host, hello.pmix_unavailable));
    if (auto [it, fresh] = first_named.emplace(hello.hostname, host); !fresh)
      lacking.push_back(fmt::format("{} calls itself '{}', as {} does: PMIx needs each node's name to be its own",
                                    host, hello.hostname, it->second));
  }
  if (lacking.empty()) {
    world.pmix_everywhere = true;
    return {};
  }
  if (world.serve == MpiServe::Pmix) {
    lacking.insert(lacking.begin(), "--mpi pmix: PMIx cannot be served on every node of the job");
    lacking.push_back("nothing was started");
    throw Error(ErrorKind::Runtime, lacking);
  }
  world.serve = MpiServe::Pmi1;
  lacking.insert(lacking.begin(), "PMIx is served on no node, since some cannot serve it (Open MPI programs "
                                  "would start each rank as a world of one; --mpi pmi1 or none says what is meant)");
  return lacking;
}

// The job's plan with its k-th share on nodes[k] (see plan_shares_on_nodes), each node with
// the GPUs its agent reported.
RankPlan plan_on_nodes(ClusterContext& context, std::optional<int> ranks, MapBy map_by,
                       const std::vector<size_t>& nodes) {
  ClusterSpec cluster = context.cluster();
  ClusterSession& session = context.session();
  std::vector<bool> usable(cluster.nodes.size());
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    cluster.nodes[i].gpu_count = session.hellos()[i].gpus;
    usable[i] = session.usable(i);
  }
  return plan_shares_on_nodes(cluster, nodes, usable, ranks, map_by);
}

// The job's nodes in the order of their shares, the node the network pass placed MASTER_ADDR on
// first: rank 0 serves the rendezvous (torch's TCPStore, Gloo's store), so it runs where
// MASTER_ADDR is, which the pass moves off a first node that failed a check.
std::vector<size_t> rendezvous_node_first(ClusterContext& context, std::vector<size_t> nodes) {
  const auto it = std::find(nodes.begin(), nodes.end(), size_t(context.network().rendezvous_node));
  if (it != nodes.end()) std::rotate(nodes.begin(), it, it + 1);
  return nodes;
}

// How long the check after a failure waits for a node: past the agent's own deadline for its
// checks (kHealthDeadline), so that a slow healthy node is not left out and a hung check names
// itself, as doctor waits.
constexpr std::chrono::milliseconds kNodeCheckWait = kHealthDeadline + std::chrono::seconds(5);

// Attempts over the context's session: each planned on its nodes, with a rendezvous port no
// earlier attempt used (a rank of a lost attempt may still hold one, or a peer still dial it).
class SessionAttempts : public AttemptRunner {
 public:
  SessionAttempts(ClusterContext& context, const JobOptions& options, LaunchRequest request,
                  const OutputFactory& make_output)
      : context_(context), options_(options), request_(std::move(request)), make_output_(make_output) {}

  AttemptEnd run_attempt(int number, const std::vector<size_t>& nodes,
                         std::optional<SteadyTime> deadline) override {
    const PingReport& network = context_.network();
    LaunchRequest request = request_;
    request.job.restart_count = number;
    plan = plan_on_nodes(context_, options_.ranks, options_.map_by, nodes);
    const size_t rendezvous = size_t(plan.ranks.front().node_rank);
    request.job.master_addr = master_addr(network, rendezvous);
    std::tie(request.job.master_port, request.job.jax_coordinator_port) =
        ports_no_attempt_used(used_ports_, [&] { return rendezvous_ports(context_, int(rendezvous)); },
                              context_.cluster().nodes[rendezvous].host);

    request.mpi = mpi_world(options_, plan, request.job.job_id,
                            [&](int node) { return context_.session().hellos()[size_t(node)].hostname; });
    std::vector<std::string> mpi_warnings;
    if (request.mpi) mpi_warnings = check_pmix_on_every_node(context_, plan, *request.mpi);

    auto output = make_output_(plan);
    if (number == 0)
      for (const auto& p : network.problems)
        if (p.kind == FindingKind::Pair || p.kind == FindingKind::Interfaces) output->launch_warning(p.message);
    // Each attempt's own: a spare without PMIx turns a later attempt's MPI to PMI-1 alone.
    for (const auto& warning : mpi_warnings)
      if (warned_.insert(warning).second) output->launch_warning(warning);
    AttemptEnd end;
    end.result = run_over_session(context_.session(), plan, request, teardown_policy(options_, deadline), *output,
                                  context_.interrupt_fds(), &end.facts, &job_state_);
    output->flush();
    end.ended_by = describe_job_end(end.result, plan, options_.timeout_s, end.facts.faulty);
    return end;
  }

  // Reach and health at once: each node's own checks against the cluster file's expectations,
  // as `muster health` runs them. A node that does not answer, or fails a check, is at fault.
  std::map<size_t, std::string> check_nodes(const std::vector<size_t>& nodes) override {
    std::map<size_t, std::string> faulty;
    for (const auto& node : check_cluster_health(context_, kNodeCheckWait, false, nodes).nodes) {
      if (!node.health) {
        faulty[node.node] = node.why_not;
        continue;
      }
      std::vector<std::string> failed;
      for (const auto& f : node.health->findings)
        if (f.status == HealthStatus::Fail) failed.push_back(f.summary());
      if (!failed.empty()) faulty[node.node] = fmt::format("failed its health check: {}", fmt::join(failed, "; "));
    }
    return faulty;
  }

  // --drain-bad: Slurm hears of a node left out at once, as health --drain would tell it, and
  // gives it to no later job; a drain an administrator made stays theirs. A drain that fails
  // is said and the job goes on: the node is left out all the same.
  std::string leave_out(size_t node, const std::string& why) override {
    if (!options_.drain_bad) return "";
    const std::string& name = host(node);
    try {
      if (!drains_) drains_ = scontrol_node_control(std::chrono::seconds(10));
      const std::string job = Environment::current().get("SLURM_JOB_ID");
      return drain_or_resume(*drains_, name, fmt::format("left out of job {}: {}", job.empty() ? "?" : job, why))
          .message;
    } catch (const Error& e) {
      return fmt::format("--drain-bad: {} was not drained: {}", name, e.what());
    }
  }

  std::string host(size_t node) const override { return context_.cluster().nodes[node].host; }

  RankPlan plan;  // the last attempt's

 private:
  // The address the network pass chose for the node it placed MASTER_ADDR on, else rank 0's
  // node's own address in the chosen subnet (its interface there), else the one muster reached
  // it at.
  std::string master_addr(const PingReport& network, size_t node) {
    if (int(node) == network.rendezvous_node) return *network.choice.master_addr;
    if (auto it = network.choice.interface_of.find(int(node)); it != network.choice.interface_of.end())
      for (const auto& a : context_.session().hellos()[node].addresses)
        if (a.interface == it->second) return a.address;
    return context_.cluster().nodes[node].address;
  }

  ClusterContext& context_;
  const JobOptions& options_;
  const LaunchRequest request_;
  const OutputFactory& make_output_;
  std::set<int> used_ports_;
  std::set<std::string> warned_;  // the MPI warnings said so far, once each for the job
  SessionJobState job_state_;  // the job's control socket and --stall reading, for every attempt
  std::unique_ptr<SlurmNodeControl> drains_;  // --drain-bad's scontrol, once a node is left out
};

// Ranks on other machines: the session's agents, started again as --restarts allows.
LaunchedJob run_across_nodes(ClusterContext& context, const JobOptions& options,
                             const OutputFactory& make_output, std::optional<SteadyTime> deadline) {
  // 1. Every node reached; the request every attempt shares.
  const Environment muster_env = node_environment();
  LaunchRequest request = launch_request(options, context.cluster(), muster_env);
  ClusterSession& session = context.session();  // reaches every node now: what follows reads their hellos

  // 2. Rank 0's rendezvous and each node's interfaces, chosen from what was measured: an
  //    address of rank 0's node every node reached, and per node the interface in the subnet
  //    that joins them all. Nothing starts when there is none, or a machine is listed twice.
  const PingReport& network = context.network();
  std::vector<std::string> blocking = network.blocking_problems();
  if (!blocking.empty()) {
    blocking.push_back("nothing was started; 'muster ping -f FILE' shows the whole picture");
    throw Error(ErrorKind::Runtime, blocking);
  }
  for (const auto& [node, name] : network.choice.interface_of) {
    request.job.node_env[node] = {{"NCCL_SOCKET_IFNAME", "=" + name}, {"GLOO_SOCKET_IFNAME", name}};
    // MPI's own transport on the same network: Open MPI's TCP BTL, and on a node without RDMA
    // UCX (Debian's MPICH is built on it; with RDMA it would lose verbs), unless the user
    // chose theirs.
    request.job.node_defaults[node] = {{"OMPI_MCA_btl_tcp_if_include", name}};
    if (!session.hellos()[size_t(node)].rdma) request.job.node_defaults[node]["UCX_NET_DEVICES"] = name;
  }

  // 3. Each attempt: the plan on its nodes, a fresh rendezvous, the MPI service, the ranks.
  auto [working, spares] = working_and_spare_nodes(context.cluster());
  SessionAttempts runner(context, options, std::move(request), make_output);
  RestartedJob restarted =
      run_with_restarts(runner, rendezvous_node_first(context, working), spares, options.restarts, deadline);
  LaunchedJob job;
  job.plan = std::move(runner.plan);
  job.result = std::move(restarted.result);
  job.attempts = std::move(restarted.attempts);
  for (const auto& [node, why] : restarted.left_out) job.left_out.emplace_back(context.cluster().nodes[node].host, why);
  job.result.notes.insert(job.result.notes.end(), restarted.told.begin(), restarted.told.end());
  return job;
}

}  // namespace

std::string describe_job_end(const JobResult& result, const RankPlan& plan, double timeout_s,
                             const std::map<size_t, std::string>& lost) {
  auto rank_on = [&](int rank) {
    return fmt::format("rank {} ({})", rank, rank >= 0 && rank < plan.world_size() ? plan.ranks[size_t(rank)].host : "?");
  };
  switch (result.end) {
    case JobEnd::Completed: return "every rank exited 0";
    case JobEnd::RankFailed:
      if (result.aborted) return result.aborted->said;
      for (const auto& r : result.ranks)
        if (result.first_failed_rank && r.rank == *result.first_failed_rank && r.status)
          return fmt::format("{} {}", rank_on(r.rank), r.status->describe());
      return "a rank failed";
    case JobEnd::StartFailed:
      return fmt::format("{} could not start: {}", rank_on(result.first_failed_rank.value_or(0)), result.start_error);
    case JobEnd::NodeLost:
      for (const auto& [node, why] : lost)
        if (node < plan.nodes.size()) return fmt::format("lost contact with {}: {}", plan.nodes[node].host, why);
      return fmt::format("{} was on a node that was lost", rank_on(result.first_failed_rank.value_or(0)));
    case JobEnd::Interrupted:
      if (const char* name = sigabbrev_np(result.received_signal)) return fmt::format("interrupted by SIG{}", name);
      return fmt::format("interrupted by signal {}", result.received_signal);
    case JobEnd::TimedOut: return fmt::format("the job ran past --timeout {}s", timeout_s);
    case JobEnd::TimeLimit: return "Slurm time limit: the job was ended at its time limit";
  }
  return "";
}

const char* job_end_name(JobEnd end) {
  switch (end) {
    case JobEnd::Completed: return "completed";
    case JobEnd::RankFailed: return "rank_failed";
    case JobEnd::StartFailed: return "start_failed";
    case JobEnd::Interrupted: return "interrupted";
    case JobEnd::TimedOut: return "timed_out";
    case JobEnd::TimeLimit: return "time_limit";
    case JobEnd::NodeLost: return "node_lost";
  }
  return "?";
}

RankPlan plan_job(ClusterContext& context, std::optional<int> ranks, MapBy map_by) {
  ClusterSpec cluster = context.cluster();
  if (context.is_local()) {
    HwlocTopologySource this_machine;
    learn_local_gpus(cluster, this_machine);
    return make_rank_plan(cluster, ranks, map_by);
  }
  return plan_on_nodes(context, ranks, map_by, rendezvous_node_first(context, working_and_spare_nodes(cluster).first));
}

void refuse_this_machine_listed_twice(const ClusterContext& context) {
  // Across nodes the network pass finds two entries of one machine by machine-id
  // (PingReport::blocking_problems); here, entries that are all this machine.
  if (const auto& nodes = context.cluster().nodes; context.is_local() && nodes.size() > 1) {
    std::vector<std::string> names;
    for (const auto& n : nodes) names.push_back(n.host == n.address ? n.host : n.host + " (" + n.address + ")");
    throw Error(ErrorKind::Config,
                fmt::format("{} are all this machine: its ranks would be started as {} nodes, each with local "
                            "rank 0 and the same GPUs; list it once with its slots (-H localhost:{}), or "
                            "leave the cluster out to use this machine",
                            fmt::join(names, " and "), nodes.size(), nodes.size()));
  }
}

LaunchedJob launch_job(ClusterContext& context, const JobOptions& options,
                       const OutputFactory& make_output) {
  // --timeout bounds the whole job: one deadline, from now, that every attempt shares.
  std::optional<SteadyTime> deadline;
  if (options.timeout_s > 0) deadline = std::chrono::steady_clock::now() + seconds_to_ms(options.timeout_s);
  LaunchedJob job;
  if (context.is_local()) {
    LocalAttempts runner(context, options, make_output);
    std::vector<size_t> nodes(context.cluster().nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) nodes[i] = i;
    RestartedJob restarted = run_with_restarts(runner, nodes, {}, options.restarts, deadline);
    job = std::move(runner.job);
    job.attempts = std::move(restarted.attempts);
  } else {
    job = run_across_nodes(context, options, make_output, deadline);
  }
  // A SIGTERM inside an allocation is Slurm's: its time limit, scancel or a preemption. (The
  // query asks slurmctld only for such an end.)
  explain_slurm_signal(job.result, Environment::current(), *scontrol_job_query(std::chrono::milliseconds(2000)));
  return job;
}

}  // namespace muster
