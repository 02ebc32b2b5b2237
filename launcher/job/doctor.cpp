#include "launcher/job/doctor.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <map>
#include <set>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/cluster/hostfile.h"
#include "launcher/cluster/hostlist.h"
#include "launcher/error.h"
#include "launcher/job/cluster_ping.h"
#include "launcher/job/network_verdicts.h"
#include "launcher/job/health_check.h"
#include "launcher/remote/health_report.h"
#include "launcher/job/launch.h"
#include "launcher/job/node_facts.h"
#include "launcher/job/smoke_check.h"
#include "topology/topology_source.h"

namespace muster {

const char* status_name(CheckStatus s) {
  switch (s) {
    case CheckStatus::Pass: return "pass";
    case CheckStatus::Warn: return "warn";
    case CheckStatus::Fail: return "fail";
    case CheckStatus::Skip: return "skip";
  }
  return "?";
}

CheckStatus DoctorReport::overall() const {
  bool warned = false;
  for (const auto& c : checks) {
    if (c.status == CheckStatus::Fail) return CheckStatus::Fail;
    warned |= c.status == CheckStatus::Warn;
  }
  return warned ? CheckStatus::Warn : CheckStatus::Pass;
}

const std::vector<std::string>& doctor_stages() {
  static const std::vector<std::string> stages = {"cluster", "ssh", "topology", "health",
                                                  "network", "launch", "smoke"};
  return stages;
}

namespace {

// Each of the search's streams: long enough past TCP's slow start on a data-centre link to
// tell a node at half its peers' rate, short enough that three rounds stay under a second.
constexpr std::chrono::milliseconds kSearchStream{100};

std::string plural(size_t n, const char* word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

struct Discard : JobOutput {
  void line(int, OutputStream, std::string_view) override {}
  void flush() override {}
};

class Doctor {
 public:
  Doctor(const DoctorRequest& request, DoctorObserver& observer)
      : request_(request), observer_(observer) {}

  // Runs one stage unless it was deselected or a stage it needs failed.
  void stage(const std::string& name, const std::vector<std::string>& needs,
             const std::function<void()>& run) {
    auto started = std::chrono::steady_clock::now();
    StageResult result{name, CheckStatus::Pass, "", 0};
    // Every other stage works on the cluster, so reading it is never skipped.
    const bool selected = name == "cluster" ||
                          ((request_.only.empty() || contains(request_.only, name)) &&
                           !contains(request_.skip, name));
    std::string failed_need;  // the stage that failed, itself or through a stage it skipped
    for (const auto& need : needs)
      if (auto it = failed_.find(need); it != failed_.end()) failed_need = it->second;
    if (!selected || !failed_need.empty()) {
      result.status = CheckStatus::Skip;
      result.reason = selected ? fmt::format("skipped: the {} stage failed", failed_need)
                               : "not selected (--only / --skip)";
      if (!failed_need.empty()) failed_[name] = failed_need;  // what needs it is skipped too
      add(name, "stage", std::nullopt, CheckStatus::Skip, result.reason);
    } else {
      begin(name);
      const size_t first = report_.checks.size();
      try {
        run();
      } catch (const Interrupted&) {
        throw;  // Ctrl-C ends doctor, not just the stage
      } catch (const std::exception& e) {
        add(name, "stage", std::nullopt, CheckStatus::Fail, e.what());
      }
      fail_nodes_lost_in(name);
      summarize(first, result);
      observer_.end_stage(name, result.status, result.reason);
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    report_.stages.push_back(result);
  }

  // A node the ssh stage reached and a later stage lost fails that stage, said once: what
  // could not be checked on it is no pass (16 of 32 nodes lost after the ssh stage once
  // passed doctor with warnings, the launch and smoke run on the other 16).
  void fail_nodes_lost_in(const std::string& stage) {
    if (stage == "ssh" || !context_ || context_->is_local() || !context_->has_session()) return;
    ClusterSession& session = context_->session();
    for (size_t i = 0; i < session.size(); ++i)
      if (session.reach()[i].ok && !session.usable(i) && lost_said_.insert(i).second)
        add(stage, "lost", host(i), CheckStatus::Fail, session.why_unusable(i));
  }

  // --- the stages ----------------------------------------------------------------------

  void check_cluster_file() {
    ClusterSpec cluster;
    try {
      cluster = load_cluster(request_.cluster);
    } catch (const Error& e) {
      report_.config_error = true;
      for (const auto& m : e.messages()) add("cluster", "cluster file", std::nullopt, CheckStatus::Fail, m);
      throw Error(ErrorKind::Config, "the cluster description is invalid");
    }
    report_.cluster = cluster.name.empty() ? cluster.source : cluster.name;
    add("cluster", "cluster file", std::nullopt, CheckStatus::Pass,
        cluster.is_this_machine
            ? std::string("no cluster given: checking this machine")
            : fmt::format("{}: {}", report_.cluster, plural(cluster.nodes.size(), "node")));
    context_ = std::make_unique<ClusterContext>(std::move(cluster), request_.remote, request_.transport);
  }

  void check_ssh_reach() {
    if (context_->is_local()) {
      add("ssh", "reach", std::nullopt, CheckStatus::Skip, "this machine: no SSH needed");
      return;
    }
    ClusterSession& session = context_->session(Reach::BestEffort, [this] { observer_.step_done(); });
    for (size_t i = 0; i < session.size(); ++i) {
      const NodeReach& r = session.reach()[i];
      if (r.ok)
        add("ssh", "reach", host(i), CheckStatus::Pass,
            fmt::format("SSH {:.1f} ms (resolve {:.1f}, TCP {:.1f}), command {:.1f} ms",
                        r.timings.ssh_ms, r.timings.resolve_ms, r.timings.tcp_connect_ms, r.command_rtt_ms),
            {{"ssh_connect_seconds", r.timings.ssh_ms / 1e3}, {"command_rtt_seconds", r.command_rtt_ms / 1e3}});
      else
        add("ssh", "reach", host(i), CheckStatus::Fail, r.failure);
    }
  }

  void check_topology() {
    const CheckThresholds& checks = context_->cluster().checks;
    if (!context_->is_local() && !context_->has_session()) {
      add("topology", "nodes", std::nullopt, CheckStatus::Skip, "needs the ssh stage, which did not run");
      return;
    }
    // What each node is: this machine's topology, or what each agent reported.
    struct NodeGpus {
      std::string host;
      int gpus = 0;
      std::vector<std::string> models;
    };
    std::vector<NodeGpus> nodes;
    std::vector<NodeHello> hellos;
    if (context_->is_local()) {
      Topology t = HwlocTopologySource().load();
      NodeGpus n{host(0), int(t.gpus.size()), {}};
      for (const auto& g : t.gpus) n.models.push_back(g.model);
      if (!t.gpus.empty()) add_node_type(n.host, n.models, path_matrix(t));
      add("topology", "machine", n.host, CheckStatus::Pass,
          fmt::format("{}, {}, {} cores, {}; NVLink {}", plural(t.numa_nodes.size(), "NUMA node"),
                      describe_gpus(n.gpus, n.models), t.cores, plural(t.nics.size(), "NIC"),
                      t.nvlinks ? "from " + t.nvlink_source : t.nvlink_source));
      nodes.push_back(n);
    } else {
      ClusterSession& session = context_->session();
      for (size_t i = 0; i < session.size(); ++i) {
        if (!session.usable(i)) continue;
        const NodeHello& h = session.hellos()[i];
        nodes.push_back({host(i), h.gpus, h.gpu_models});
        hellos.push_back(h);
        if (!h.paths.devices.empty()) add_node_type(host(i), h.gpu_models, h.paths);
      }
    }
    auto differences = differences_from_majority(hellos);
    for (size_t k = 0; k < nodes.size(); ++k) {
      const auto& n = nodes[k];
      if (checks.gpus_per_node)
        add("topology", "gpus_per_node", n.host,
            n.gpus == *checks.gpus_per_node ? CheckStatus::Pass : CheckStatus::Fail,
            fmt::format("{}, checks.gpus_per_node is {}", plural(size_t(n.gpus), "GPU"),
                        *checks.gpus_per_node));
      if (checks.gpu_model) {
        bool all = !n.models.empty() && std::all_of(n.models.begin(), n.models.end(), [&](const auto& m) {
          return m.find(*checks.gpu_model) != std::string::npos;
        });
        add("topology", "gpu_model", n.host, all ? CheckStatus::Pass : CheckStatus::Fail,
            fmt::format("{}; checks.gpu_model is '{}'",
                        n.models.empty() ? "no GPU" : fmt::format("{}", fmt::join(n.models, ", ")),
                        *checks.gpu_model));
      }
      if (context_->is_local()) continue;
      std::vector<std::string> odd;
      for (const auto& d : differences[k]) odd.push_back(fmt::format("{} {} (most have {})", d.what, d.value, d.usual));
      add("topology", "same as the others", n.host, odd.empty() ? CheckStatus::Pass : CheckStatus::Warn,
          odd.empty() ? describe_node(hellos[k])
                      : fmt::format("differs from most nodes: {}", fmt::join(odd, "; ")));
    }
  }

  // Nodes with the same models and paths are one type, drawn once.
  void add_node_type(const std::string& host, const std::vector<std::string>& models, const PathMatrix& paths) {
    for (auto& type : report_.node_types)
      if (type.gpu_models == models && type.paths == paths) {
        type.hosts.push_back(host);
        return;
      }
    report_.node_types.push_back({{host}, models, paths});
  }

  void check_health() {
    if (!context_->is_local() && !context_->has_session()) {
      add("health", "node", std::nullopt, CheckStatus::Skip, "needs the ssh stage, which did not run");
      return;
    }
    health_ = check_cluster_health(*context_, request_.health_limit,
                                   request_.stress || context_->cluster().checks.stress.value_or(false));
    for (const auto& n : health_->nodes) {
      if (!n.health) {
        // A check that hung fails, as it does in muster health: a node that cannot answer
        // for its health within the limit is not one to run on. An answer that could not be
        // read is unknown; a node lost is the ssh stage's failure.
        if (n.hung)
          add("health", "node", host(n.node), CheckStatus::Fail, n.why_not);
        else if (context_->is_local() || context_->session().usable(n.node))
          add("health", "node", host(n.node), CheckStatus::Warn, "unknown: " + n.why_not);
        continue;
      }
      for (const auto& f : n.health->findings) report_.checks.push_back(health_check_of(f, host(n.node)));
    }
  }

  // The links' error counters read again once everything else ran: a counter that grew
  // while doctor's own traffic crossed the link names a link that is failing now.
  void recheck_link_counters() {
    if (!health_ || !context_) return;
    const size_t first = report_.checks.size();
    for (auto& [node, f] : counters_grown_since(*context_, *health_, request_.health_limit))
      report_.checks.push_back(health_check_of(f, host(node)));
    if (report_.checks.size() == first) return;
    for (auto& stage : report_.stages)
      if (stage.name == "health")
        for (size_t i = first; i < report_.checks.size(); ++i)
          if (report_.checks[i].status > stage.status || stage.status == CheckStatus::Skip) {
            stage.status = report_.checks[i].status;
            stage.reason = report_.checks[i].reason;
          }
  }

  void check_network() {
    if (context_->is_local() || context_->cluster().nodes.size() < 2) {
      add("network", "pairs", std::nullopt, CheckStatus::Skip, "one node: no pairs to probe");
      return;
    }
    if (!context_->has_session()) {
      add("network", "pairs", std::nullopt, CheckStatus::Skip, "needs the ssh stage, which did not run");
      return;
    }
    PingOptions ping;
    ping.round_trips = 20;
    // Streams last a fixed time, not a byte count: a slow link costs its budget and no more.
    // Bandwidth is the pair search's (find_culprits): rounds of disjoint pairs, every node
    // measured with a partner known fast, slow nodes named in four rounds at any size. The
    // whole mesh (n-1 rounds) is ping --bandwidth's, for when a link must be found.
    ping.bandwidth = false;
    ping.bulk = kSearchStream;
    ping.on_pair_done = [this] { observer_.step_done(); };
    PingReport r = ping_cluster(context_->session(), context_->cluster(), ping, context_->interrupt_fds());
    const CulpritReport found = search_slow_pairs(context_->session(), context_->cluster(), r, ping,
                                                  context_->interrupt_fds());
    for (auto& f : slow_pair_findings(context_->cluster(), r, found)) r.problems.push_back(std::move(f));
    place_rendezvous(context_->cluster(), r, nodes_failed_so_far());
    report_.pair_search = found;
    // Nothing judged is no pass, and says so as a warning: two nodes without
    // checks.min_bandwidth_gbps (a pair alone cannot tell which end is slow), or no stream measured.
    const std::string measured = fmt::format("{} pairs in {} rounds of the pair search, typical {:.2f} Gbit/s",
                                             found.measured.size(), found.rounds, found.typical_gbps);
    if (std::none_of(r.problems.begin(), r.problems.end(),
                     [](const Finding& f) { return f.kind == FindingKind::Bandwidth; }))
      add("network", "bandwidth", std::nullopt, found.threshold_gbps > 0 ? CheckStatus::Pass : CheckStatus::Warn,
          found.threshold_gbps > 0
              ? fmt::format("{}: each of the {} nodes streamed at or above the bar ({:.2f} Gbit/s) with a partner "
                            "(a pair is never faster than its slower end)", measured, found.cleared,
                            found.threshold_gbps)
              : measured + ": not judged, nothing to compare it with (a pair alone cannot tell which end is slow); "
                           "set checks.min_bandwidth_gbps to judge it");
    // Each node's pairs, gathered in one pass: at 64 nodes there are 4032 of them per address.
    std::vector<std::vector<const ProbeResult*>> probed_by(r.nodes.size());
    for (const auto& p : r.pairs)
      if (p.src >= 0 && size_t(p.src) < probed_by.size() && r.nodes[size_t(p.dst)].facts)  // a lost target is its own finding
        probed_by[size_t(p.src)].push_back(&p.result);
    for (size_t i = 0; i < r.nodes.size(); ++i) {
      if (!r.nodes[i].facts) continue;
      // A pair left unmeasured (both its ends were short of CPU, or its prober never got to
      // try the address) is neither reached nor unreachable: unknown, a warning.
      int peers = 0, reached = 0, unknown = 0;
      std::vector<double> medians;
      for (const ProbeResult* result : probed_by[i]) {
        ++peers;
        reached += result->reachable;
        unknown += !result->reachable && !result->starved.empty();
        if (result->reachable) medians.push_back(result->rtt.median_us);
      }
      std::sort(medians.begin(), medians.end());
      std::map<std::string, double> values = {{"peers_reached", reached}, {"peers", peers}};
      if (unknown) values["peers_not_measured"] = unknown;
      if (!medians.empty()) values["rtt_median_seconds"] = medians[(medians.size() - 1) / 2] / 1e6;
      const CheckStatus status = reached + unknown < peers ? CheckStatus::Fail
                                 : unknown               ? CheckStatus::Warn
                                                         : CheckStatus::Pass;
      add("network", "pairs", host(i), status,
          fmt::format("reached {} of {} peer addresses{}{}", reached, peers,
                      unknown ? fmt::format(" ({} not measured: this node could not measure them)", unknown) : "",
                      medians.empty() ? "" : fmt::format(", median RTT {:.0f} us", medians[(medians.size() - 1) / 2])),
          values);
      if (r.nodes[i].clock_offset_ms)
        add("network", "clock", host(i), CheckStatus::Pass,
            fmt::format("{:+.1f} ms (±{:.1f}) from the head", *r.nodes[i].clock_offset_ms, r.nodes[i].clock_error_ms),
            {{"clock_offset_seconds", *r.nodes[i].clock_offset_ms / 1e3},
             {"clock_error_seconds", r.nodes[i].clock_error_ms / 1e3}});
    }
    // Every problem found becomes a check of the node it names (or of the cluster). The ssh
    // stage reported unreachable nodes; the topology stage compared the nodes.
    for (const auto& p : r.problems) {
      if (p.kind == FindingKind::Reach || p.kind == FindingKind::Facts) continue;
      add("network", finding_name(p.kind), p.node ? std::optional(host(size_t(*p.node))) : std::nullopt,
          p.severity == Finding::Severity::Fail ? CheckStatus::Fail : CheckStatus::Warn, p.message);
    }
    if (r.choice.master_addr) {
      // Nodes grouped by interface, as host lists: "eth0 on node[1-64]", one line at any size.
      std::map<std::string, std::vector<std::string>> nodes_of;
      for (const auto& [n, name] : r.choice.interface_of) nodes_of[name].push_back(host(size_t(n)));
      std::vector<std::string> names;
      for (const auto& [name, hosts] : nodes_of) names.push_back(name + " on " + fold_hostlist(hosts));
      std::string where;
      if (r.rendezvous_passed_over)
        where = fmt::format(" on {}, not {}, which failed a check", host(size_t(r.rendezvous_node)),
                            host(size_t(*r.rendezvous_passed_over)));
      else if (r.rendezvous_on_failed_node)
        where = fmt::format(" on {}, which failed a check: every node reached failed one",
                            host(size_t(r.rendezvous_node)));
      add("network", "rendezvous", std::nullopt, r.rendezvous_on_failed_node ? CheckStatus::Warn : CheckStatus::Pass,
          fmt::format("MASTER_ADDR {}{}{}", *r.choice.master_addr, where,
                      names.empty() ? "" : fmt::format("; interfaces {}", fmt::join(names, ", "))));
    }
    // In a ring every rank waits on the slowest link: the smoke stage's slowest rank names
    // nobody, and what the network stage named is what slows it.
    for (const auto& p : r.problems)
      if (p.kind == FindingKind::Bandwidth && p.severity == Finding::Severity::Fail)
        if (const std::string named = p.node ? host(size_t(*p.node)) : "a slow link";
            !contains(slow_by_network_, named))
          slow_by_network_.push_back(named);
    report_.network = r;                       // for reports that draw the pairs
    context_->remember_network(std::move(r));  // the launch uses these choices
  }

  void check_launch() {
    JobOptions launch = job_options();
    launch.command = {"true"};
    launch.timeout_s = 120;
    LaunchedJob job = launch_job(*context_, launch, [](const RankPlan&) { return std::make_unique<Discard>(); });
    if (job.result.end == JobEnd::Interrupted)
      throw Interrupted(job.result.received_signal, "during the launch stage; its ranks were stopped");
    std::set<int> nodes;
    for (const auto& r : job.plan.ranks) nodes.insert(r.node_rank);
    if (job.result.exit_code() == 0)
      add("launch", "ranks", std::nullopt, CheckStatus::Pass,
          fmt::format("{} on {} started and exited 0{}{}", plural(size_t(job.plan.world_size()), "rank"),
                      plural(nodes.size(), "node"), why_this_many_ranks_, left_out()));
    else
      add("launch", "ranks", std::nullopt, CheckStatus::Fail,
          fmt::format("a trivial job failed with exit status {}{}{}", job.result.exit_code(),
                      job.result.start_error.empty() ? "" : ": " + job.result.start_error,
                      job.result.notes.empty() ? "" : "; " + fmt::format("{}", fmt::join(job.result.notes, "; "))));
  }

  void check_smoke() {
    SmokeRequest smoke;
    smoke.launch = job_options(probe_rank_options());
    smoke.settings.ops = {CollectiveOp::AllReduce};
    // A check that collectives work and carry data at a plausible rate, not a benchmark
    // (`muster smoke` is that): one checked warm-up and two timed all-reduces of a modest
    // size. Each costs 2(n-1) messages a rank (85 ms on 16 nodes sharing 2 cores); five timed
    // took half the stage, and the rate is judged against a bar (checks.min_busbw_gbps), not
    // to a percent. The network stage has already judged every node's bandwidth.
    smoke.settings.min_bytes = smoke.settings.max_bytes = 1 << 20;
    smoke.settings.iters = 2;
    smoke.settings.warmup = 1;
    smoke.on_other_line = [this](int rank, std::string_view text) { observer_.other_line(rank, text); };
    SmokeOutcome outcome = run_smoke(*context_, smoke);
    std::vector<Finding> hello_problems, other_problems;
    for (const auto& p : outcome.problems)
      (p.kind == FindingKind::Hello || p.kind == FindingKind::Duplicate ? hello_problems : other_problems)
          .push_back(p);
    if (hello_problems.empty())
      add("smoke", "hello", std::nullopt, CheckStatus::Pass,
          fmt::format("{} of {} ranks answered once each, no duplicates", outcome.hellos.size(),
                      outcome.plan.world_size()));
    for (const auto& p : hello_problems) add("smoke", "hello", std::nullopt, CheckStatus::Fail, p.message);
    for (const auto& p : other_problems)
      add("smoke", p.kind == FindingKind::Busbw ? "min_busbw_gbps" : "all_reduce", std::nullopt,
          CheckStatus::Fail, p.message);
    for (const auto& row : outcome.rows)
      if (row.op == CollectiveOp::AllReduce && other_problems.empty())
        add("smoke", "all_reduce", std::nullopt, CheckStatus::Pass,
            fmt::format("{} at {} bytes over {}: busbw {:.3f} GB/s, {} wrong{}{}",
                        outcome.backend, row.bytes, plural(size_t(row.ranks), "rank"), row.busbw_gbps,
                        row.wrong, row.ranks == 1 ? " (one slot: nothing crossed a link)" : "",
                        slow_by_network_.empty() ? ""
                            : fmt::format("; a ring runs at its slowest link, and the network stage "
                                          "named {}", fmt::join(slow_by_network_, " and "))),
            {{"busbw_bytes_per_second", row.busbw_gbps * 1e9}, {"collective_time_seconds", row.time_us / 1e6},
             {"message_bytes", double(row.bytes)}, {"wrong_elements", double(row.wrong)}});
  }

  int network_pairs() {
    int reached = 0;
    for (size_t i = 0; i < context_->session().size(); ++i) reached += context_->session().usable(i);
    return probe_pair_count(reached);
  }

  DoctorReport finish(double seconds) {
    report_.seconds = seconds;
    return std::move(report_);
  }

 private:
  // Only the ssh and network stages can count their steps as they go.
  void begin(const std::string& name) {
    if (name == "ssh" && context_ && !context_->is_local())
      observer_.begin_stage(name, int(context_->cluster().nodes.size()), "nodes");
    else if (name == "network" && context_ && context_->has_session())
      observer_.begin_stage(name, network_pairs(), "pairs");
    else
      observer_.begin_stage(name, 0, "");
  }

  // The stage's status is the worst of its checks (skipped when all were); its reason is
  // that of the first check with that status. A stage blocks what needs it only when
  // nothing in it passed: one node down in the ssh stage still leaves the others to check.
  void summarize(size_t first, StageResult& result) {
    bool all_skipped = first < report_.checks.size(), any_passed = false;
    result.status = CheckStatus::Pass;
    for (size_t i = first; i < report_.checks.size(); ++i) {
      all_skipped &= report_.checks[i].status == CheckStatus::Skip;
      any_passed |= report_.checks[i].status == CheckStatus::Pass;
      if (report_.checks[i].status != CheckStatus::Skip)
        result.status = std::max(result.status, report_.checks[i].status);
    }
    if (all_skipped) result.status = CheckStatus::Skip;
    result.reason = first < report_.checks.size() ? report_.checks.back().reason : "";
    for (size_t i = first; i < report_.checks.size(); ++i)
      if (report_.checks[i].status == result.status) {
        result.reason = report_.checks[i].reason;
        break;
      }
    if (result.status == CheckStatus::Fail && !any_passed) failed_[result.name] = result.name;
  }

  // The launch and smoke stages' ranks: every slot of every node that answered. A lone
  // CPU-only slot would test no collective at all, so a single rank becomes two when its
  // node has two cores or more, and the reason says so.
  JobOptions job_options(JobOptions options = {}) {
    options.map_by = request_.cluster.map_by;
    options.ranks = request_.cluster.ranks;
    if (!ranks_decided_) {
      ranks_decided_ = true;
      RankPlan plan = plan_job(*context_, options.ranks, options.map_by);
      if (!options.ranks && plan.world_size() == 1 && !plan.ranks.front().gpu) {
        const int node = plan.ranks.front().node_rank;
        const int cpus = context_->is_local() ? HwlocTopologySource().load().pus
                                              : context_->session().hellos()[size_t(node)].cpus;
        if (cpus >= 2) {
          context_->cluster().nodes[size_t(node)].slots.fixed = 2;
          why_this_many_ranks_ = fmt::format(" (2 ranks on {}: it has no GPU, and two CPU ranks "
                                             "make the collectives cross processes)", host(size_t(node)));
        }
      }
    }
    if (!why_this_many_ranks_.empty()) options.ranks = 2;
    return options;
  }

  // " (node3 left out: ...)" for the nodes a launch could not use.
  std::string left_out() {
    if (context_->is_local()) return "";
    std::vector<std::string> names;
    for (size_t i = 0; i < context_->session().size(); ++i)
      if (!context_->session().usable(i)) names.push_back(host(i));
    return names.empty() ? "" : fmt::format(" ({} left out: not reached)", fmt::join(names, ", "));
  }

  std::string host(size_t node) const { return context_->cluster().nodes[node].host; }

  // The nodes a stage before this one failed (a GPU off the bus, a check that hung): MASTER_ADDR
  // goes elsewhere when a node passed, as it does from a node the network found slow.
  std::set<int> nodes_failed_so_far() const {
    std::set<std::string> failed;
    for (const auto& c : report_.checks)
      if (c.status == CheckStatus::Fail && c.node) failed.insert(*c.node);
    std::set<int> out;
    for (size_t i = 0; i < context_->cluster().nodes.size(); ++i)
      if (failed.count(host(i))) out.insert(int(i));
    return out;
  }

  void add(const std::string& stage, const std::string& name, std::optional<std::string> node,
           CheckStatus status, const std::string& reason, std::map<std::string, double> values = {}) {
    report_.checks.push_back({stage, name, std::move(node), status, reason, std::move(values)});
  }

  const DoctorRequest& request_;
  DoctorObserver& observer_;
  DoctorReport report_;
  std::unique_ptr<ClusterContext> context_;
  std::set<size_t> lost_said_;  // nodes whose loss a stage has failed on
  // Each stage that cannot be built on, to the stage whose failure caused it (itself, or
  // the failed stage that made it skip): "skipped: the cluster stage failed", not "ssh".
  std::map<std::string, std::string> failed_;
  std::optional<ClusterHealth> health_;  // the health stage's first read, for the counters' second
  bool ranks_decided_ = false;
  std::string why_this_many_ranks_;
  std::vector<std::string> slow_by_network_;  // nodes (or "a slow link") the network stage failed on bandwidth
};

}  // namespace

Check health_check_of(const HealthFinding& f, std::optional<std::string> node) {
  CheckStatus status = CheckStatus::Pass;
  switch (f.status) {
    case HealthStatus::Pass: status = CheckStatus::Pass; break;
    case HealthStatus::Warn: status = CheckStatus::Warn; break;
    case HealthStatus::Fail: status = CheckStatus::Fail; break;
    case HealthStatus::Unknown: status = CheckStatus::Warn; break;
    case HealthStatus::Absent: status = CheckStatus::Skip; break;
  }
  std::string reason = f.summary();
  if (f.status == HealthStatus::Unknown) reason = "unknown: " + reason;
  if (!f.remedy.empty() && f.status != HealthStatus::Pass && f.status != HealthStatus::Absent)
    reason += "; " + f.remedy;
  return {"health", f.check, std::move(node), status, reason, f.values, f};
}

DoctorReport run_node_health(const ClusterInput& cluster, const std::string& snapshot,
                             std::chrono::milliseconds deadline, bool stress) {
  auto started = std::chrono::steady_clock::now();
  DoctorReport report;
  HealthExpectations expect;
  if (!cluster.cluster_file.empty()) {
    // Only the file's `expect:` is used here; its nodes are not reached.
    ClusterSpec spec = load_cluster(cluster);
    expect = spec.expect;
    report.cluster = spec.name.empty() ? spec.source : spec.name;
    stress = stress || spec.checks.stress.value_or(false);
  }
  if (stress) expect.stress.run = true;
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  const std::string node = name;
  if (report.cluster.empty()) report.cluster = node;
  // A snapshot may be of another machine: this machine's NVML is not its.
  const NodeHealth health = snapshot.empty()
                                ? check_this_node(health_root_of_this_node(), expect, deadline)
                                : check_this_node(snapshot, expect, deadline, GpuLibrariesAsked::NotForASnapshot);
  for (const auto& f : health.findings)
    report.checks.push_back(health_check_of(f, node));
  // The stage is the worst of its checks, its reason the first check of that status.
  StageResult stage{"health", CheckStatus::Skip, "", 0};
  for (const auto& c : report.checks)
    if (c.status != CheckStatus::Skip && (stage.status == CheckStatus::Skip || c.status > stage.status))
      stage.status = c.status, stage.reason = c.reason;
  report.seconds = stage.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  report.stages.push_back(stage);
  return report;
}

DoctorReport run_doctor(const DoctorRequest& request, DoctorObserver& observer) {
  for (const auto& list : {request.only, request.skip})
    for (const auto& s : list)
      if (!contains(doctor_stages(), s))
        throw Error(ErrorKind::Usage, fmt::format("unknown stage '{}'; the stages are {}", s,
                                                  fmt::join(doctor_stages(), ", ")));
  auto started = std::chrono::steady_clock::now();
  Doctor doctor(request, observer);
  // The stages in order, over one session; each names the stages whose failure makes it
  // pointless.
  doctor.stage("cluster", {}, [&] { doctor.check_cluster_file(); });        // the file is valid
  doctor.stage("ssh", {"cluster"}, [&] { doctor.check_ssh_reach(); });      // every node answers
  doctor.stage("topology", {"ssh"}, [&] { doctor.check_topology(); });      // GPUs as expected
  doctor.stage("health", {"ssh"}, [&] { doctor.check_health(); });          // no sick hardware
  doctor.stage("network", {"ssh"}, [&] { doctor.check_network(); });        // every pair talks
  doctor.stage("launch", {"ssh"}, [&] { doctor.check_launch(); });          // ranks start and stop
  doctor.stage("smoke", {"launch"}, [&] { doctor.check_smoke(); });         // collectives work
  doctor.recheck_link_counters();                                           // no link failing now
  return doctor.finish(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

}  // namespace muster
