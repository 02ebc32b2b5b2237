// muster doctor: every stage in order, each check pass / warn / fail / skip with a reason;
// a failed stage skips only what depends on it. The CI health check.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <cstring>
#include <cerrno>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/cluster_input.h"
#include "cli/commands.h"
#include "cli/doctor_progress.h"
#include "cli/doctor_report.h"
#include "cli/job_launch.h"
#include "cli/remote_options.h"
#include "cli/smoke_checks.h"
#include "cli/terminal_output.h"
#include "launcher/job/cluster_ping.h"
#include "launcher/error.h"
#include "launcher/cluster/hostfile.h"
#include "launcher/remote/remote_job.h"
#include "probes/network_report.h"
#include "topology/topology_source.h"

namespace muster::cli {

struct DoctorOptions {
  ClusterInputOptions cluster;
  RemoteFlags remote;
  std::vector<std::string> only, skip;
  bool strict = false;
  std::string json_file, junit_file;
};

namespace {

const std::vector<std::string> kStages = {"cluster", "ssh", "topology", "network", "launch", "smoke"};

class Doctor {
 public:
  explicit Doctor(const DoctorOptions& options)
      : options_(options), progress_(isatty(STDERR_FILENO) != 0) {}

  // Runs one stage unless it was deselected or a stage it needs failed.
  void stage(const std::string& name, const std::vector<std::string>& needs,
             const std::function<void()>& run) {
    auto started = std::chrono::steady_clock::now();
    StageResult result{name, CheckStatus::Pass, "", 0};
    // Every other stage works on the cluster, so reading it is never skipped.
    const bool selected = name == "cluster" ||
                          ((options_.only.empty() || contains(options_.only, name)) &&
                           !contains(options_.skip, name));
    std::string failed_need;
    for (const auto& need : needs)
      if (failed_.count(need)) failed_need = need;
    if (!selected || !failed_need.empty()) {
      result.status = CheckStatus::Skip;
      result.reason = selected ? fmt::format("skipped: the {} stage failed", failed_need)
                               : "not selected (--only / --skip)";
      if (!failed_need.empty()) failed_.insert(name);  // what needs it is skipped too
      add(name, "stage", std::nullopt, CheckStatus::Skip, result.reason);
    } else {
      // Only the ssh and network stages can count their steps as they go.
      if (name == "ssh") progress_.begin_stage(name, int(cluster_.nodes.size()), "nodes");
      else if (name == "network" && remote_) progress_.begin_stage(name, network_rounds(), "rounds");
      else progress_.begin_stage(name, 0);
      size_t first = report_.checks.size();
      try {
        run();
      } catch (const std::exception& e) {
        add(name, "stage", std::nullopt, CheckStatus::Fail, e.what());
      }
      // The worst of its checks; a stage whose every check was skipped is skipped.
      bool all_skipped = first < report_.checks.size();
      result.status = CheckStatus::Pass;
      for (size_t i = first; i < report_.checks.size(); ++i) {
        all_skipped &= report_.checks[i].status == CheckStatus::Skip;
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
      // A stage blocks what needs it only when nothing in it passed: one node down in the
      // ssh stage still leaves the others to check.
      bool any_passed = false;
      for (size_t i = first; i < report_.checks.size(); ++i)
        any_passed |= report_.checks[i].status == CheckStatus::Pass;
      if (result.status == CheckStatus::Fail && !any_passed) failed_.insert(name);
      progress_.end_stage(name, status_name(result.status), result.reason);
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    report_.stages.push_back(result);
  }

  // --- the stages ----------------------------------------------------------------------

  void check_cluster_file() {
    try {
      cluster_ = load_cluster(options_.cluster);
    } catch (const Error& e) {
      config_error_ = true;
      for (const auto& m : e.messages()) add("cluster", "cluster file", std::nullopt, CheckStatus::Fail, m);
      throw Error(ErrorKind::Config, "the cluster description is invalid");
    }
    report_.cluster = cluster_.name.empty() ? cluster_.source : cluster_.name;
    here_only_ = only_this_machine(cluster_);
    add("cluster", "cluster file", std::nullopt, CheckStatus::Pass,
        cluster_.is_this_machine
            ? std::string("no cluster given: checking this machine")
            : fmt::format("{}: {} node{}", report_.cluster, cluster_.nodes.size(),
                          cluster_.nodes.size() == 1 ? "" : "s"));
  }

  void check_ssh_reach() {
    if (here_only_) {
      add("ssh", "reach", std::nullopt, CheckStatus::Skip, "this machine: no SSH needed");
      return;
    }
    RemoteOptions remote = options_.remote.options();
    remote.reach = Reach::BestEffort;
    remote.time_command = true;
    remote.on_node_done = [this] { progress_.step_done(); };
    transport_ = make_libssh_transport();
    remote_ = RemoteJob::open(*transport_, cluster_, remote);
    for (size_t i = 0; i < cluster_.nodes.size(); ++i) {
      const NodeReach& r = remote_->reach()[i];
      if (r.ok)
        add("ssh", "reach", cluster_.nodes[i].host, CheckStatus::Pass,
            fmt::format("SSH {:.1f} ms (resolve {:.1f}, TCP {:.1f}), command {:.1f} ms",
                        r.timings.ssh_ms, r.timings.resolve_ms, r.timings.tcp_connect_ms, r.command_rtt_ms));
      else
        add("ssh", "reach", cluster_.nodes[i].host, CheckStatus::Fail, r.failure);
    }
  }

  void check_topology() {
    const CheckThresholds& checks = cluster_.checks;
    struct NodeGpus {
      std::string host;
      int gpus = 0;
      std::vector<std::string> models;
      std::string shape;  // what must match the majority
    };
    std::vector<NodeGpus> nodes;
    if (!here_only_ && !remote_) {
      add("topology", "nodes", std::nullopt, CheckStatus::Skip, "needs the ssh stage, which did not run");
      return;
    }
    if (here_only_) {
      Topology t = HwlocTopologySource().load();
      NodeGpus n{cluster_.nodes.front().host, int(t.gpus.size()), {}, ""};
      for (const auto& g : t.gpus) n.models.push_back(g.model);
      add("topology", "machine", n.host, CheckStatus::Pass,
          fmt::format("{} NUMA node{}, {} cores, {} GPU{}, {} NIC{}; NVLink {}", t.numa_nodes.size(),
                      t.numa_nodes.size() == 1 ? "" : "s", t.cores, t.gpus.size(),
                      t.gpus.size() == 1 ? "" : "s", t.nics.size(), t.nics.size() == 1 ? "" : "s",
                      t.nvlinks ? "from " + t.nvlink_source : t.nvlink_source));
      nodes.push_back(n);
    } else {
      for (size_t i = 0; i < cluster_.nodes.size(); ++i) {
        if (!remote_->reach()[i].ok) continue;
        const NodeHello& h = remote_->hellos()[i];
        nodes.push_back({cluster_.nodes[i].host, h.gpus, h.gpu_models,
                         fmt::format("{} GPUs ({}), {} NICs, {} CPUs, {:.0f} GiB, kernel {}", h.gpus,
                                     fmt::join(h.gpu_models, ", "), h.nics, h.cpus,
                                     double(h.memory_bytes) / (1 << 30), h.kernel)});
      }
    }
    std::vector<std::string> shapes;
    for (const auto& n : nodes) shapes.push_back(n.shape);
    auto odd = differs_from_majority(shapes);
    for (size_t k = 0; k < nodes.size(); ++k) {
      const auto& n = nodes[k];
      if (checks.gpus_per_node)
        add("topology", "gpus_per_node", n.host,
            n.gpus == *checks.gpus_per_node ? CheckStatus::Pass : CheckStatus::Fail,
            fmt::format("{} GPU{}, checks.gpus_per_node is {}", n.gpus, n.gpus == 1 ? "" : "s",
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
      if (!here_only_)
        add("topology", "same as the others", n.host, odd[k] ? CheckStatus::Warn : CheckStatus::Pass,
            odd[k] ? "differs from most nodes: " + n.shape : n.shape);
    }
  }

  void check_network() {
    if (here_only_ || cluster_.nodes.size() < 2) {
      add("network", "pairs", std::nullopt, CheckStatus::Skip, "one node: no pairs to probe");
      return;
    }
    if (!remote_) {
      add("network", "pairs", std::nullopt, CheckStatus::Skip, "needs the ssh stage, which did not run");
      return;
    }
    PingOptions ping;
    ping.round_trips = 20;
    ping.bandwidth = cluster_.checks.min_bandwidth_gbps.has_value();
    ping.on_round_done = [this] { progress_.step_done(); };
    PingReport r = ping_cluster(*remote_, cluster_, ping);
    for (size_t i = 0; i < r.nodes.size(); ++i) {
      const std::string& host = r.nodes[i].host;
      if (!r.nodes[i].reach.ok) continue;
      int peers = 0, reached = 0;
      std::vector<double> medians;
      for (const auto& p : r.pairs)
        if (p.src == int(i)) {
          ++peers;
          reached += p.result.reachable;
          if (p.result.reachable) medians.push_back(p.result.rtt.median_us);
        }
      std::sort(medians.begin(), medians.end());
      add("network", "pairs", host, reached == peers ? CheckStatus::Pass : CheckStatus::Fail,
          fmt::format("reached {} of {} peer addresses{}", reached, peers,
                      medians.empty() ? "" : fmt::format(", median RTT {:.0f} us", medians[(medians.size() - 1) / 2])));
      if (r.nodes[i].clock_offset_ms)
        add("network", "clock", host, CheckStatus::Pass,
            fmt::format("{:+.1f} ms from the head", *r.nodes[i].clock_offset_ms));
    }
    // Every problem found becomes a check of the node it names (or of the cluster).
    for (const auto& p : r.problems) {
      // The ssh stage reported unreachable nodes; the topology stage compared the nodes.
      if (p.check == "reach" || p.check == "facts") continue;
      std::optional<std::string> node;
      for (const auto& n : r.nodes)
        if (p.message.rfind(n.host + " ", 0) == 0 || p.message.rfind(n.host + ":", 0) == 0) node = n.host;
      add("network", p.check, node,
          p.severity == Problem::Severity::Fail ? CheckStatus::Fail : CheckStatus::Warn, p.message);
    }
    if (r.choice.master_addr) {
      std::vector<std::string> names;
      for (const auto& [n, name] : r.choice.interface_of) names.push_back(r.nodes[size_t(n)].host + "=" + name);
      add("network", "rendezvous", std::nullopt, CheckStatus::Pass,
          fmt::format("MASTER_ADDR {}{}", *r.choice.master_addr,
                      names.empty() ? "" : fmt::format("; interfaces {}", fmt::join(names, ", "))));
    }
  }

  void check_launch() {
    JobLaunchOptions launch;
    launch.cluster = options_.cluster;
    launch.remote = options_.remote;
    launch.command = {"true"};
    launch.timeout_s = 120;
    remote_.reset();  // the launch makes its own connections
    LaunchedJob job = launch_job(launch, [](const RankPlan&) { return std::make_unique<Discard>(); });
    std::set<int> nodes;
    for (const auto& r : job.plan.ranks) nodes.insert(r.node_rank);
    if (job.result.exit_code() == 0)
      add("launch", "ranks", std::nullopt, CheckStatus::Pass,
          fmt::format("{} rank{} on {} node{} started and exited 0", job.plan.world_size(),
                      job.plan.world_size() == 1 ? "" : "s", nodes.size(), nodes.size() == 1 ? "" : "s"));
    else
      add("launch", "ranks", std::nullopt, CheckStatus::Fail,
          fmt::format("a trivial job failed with exit status {}{}", job.result.exit_code(),
                      job.result.start_error.empty() ? "" : ": " + job.result.start_error));
  }

  void check_smoke() {
    SmokeOptions smoke;
    smoke.launch.cluster = options_.cluster;
    smoke.launch.remote = options_.remote;
    smoke.settings.ops = {CollectiveOp::AllReduce};
    smoke.settings.min_bytes = smoke.settings.max_bytes = 1 << 20;  // a modest size
    smoke.settings.iters = 10;
    smoke.settings.warmup = 3;
    SmokeOutcome outcome = run_smoke_checks(smoke);
    std::vector<SmokeProblem> hello_problems, other_problems;
    for (const auto& p : outcome.problems)
      (p.check == "hello" || p.check == "duplicate" ? hello_problems : other_problems).push_back(p);
    if (hello_problems.empty())
      add("smoke", "hello", std::nullopt, CheckStatus::Pass,
          fmt::format("{} of {} ranks answered once each, no duplicates", outcome.hellos,
                      outcome.plan.world_size()));
    for (const auto& p : hello_problems) add("smoke", "hello", std::nullopt, CheckStatus::Fail, p.message);
    for (const auto& p : other_problems)
      add("smoke", p.check == "busbw" ? "min_busbw_gbps" : "all_reduce", std::nullopt, CheckStatus::Fail, p.message);
    for (const auto& row : outcome.rows)
      if (row.op == CollectiveOp::AllReduce && other_problems.empty())
        add("smoke", "all_reduce", std::nullopt, CheckStatus::Pass,
            fmt::format("{} at {} bytes over {} rank{}: busbw {:.3f} GB/s, {} wrong; slowest rank {}{}",
                        outcome.backend, row.bytes, row.ranks, row.ranks == 1 ? "" : "s",
                        row.busbw_gbps, row.wrong, row.slowest_rank,
                        row.ranks == 1 ? " (one slot: nothing crossed a link)" : ""));
  }

  int network_rounds() const {
    int reached = 0;
    for (const auto& r : remote_->reach()) reached += r.ok;
    return probe_rounds(reached);
  }

  // --- the end ---------------------------------------------------------------------------

  int finish(double seconds) {
    report_.seconds = seconds;
    if (!options_.json_file.empty()) write_file(options_.json_file, doctor_json(report_).dump(2) + "\n");
    if (!options_.junit_file.empty()) write_file(options_.junit_file, doctor_junit(report_));
    const char* no_colour = std::getenv("NO_COLOR");
    bool colour = isatty(STDOUT_FILENO) && !(no_colour && *no_colour);
    print_out(doctor_summary(report_, colour));
    if (config_error_) return kUsageExit;
    CheckStatus overall = report_.overall();
    return overall == CheckStatus::Fail || (options_.strict && overall == CheckStatus::Warn) ? 1 : 0;
  }

 private:
  struct Discard : JobOutput {
    void line(int, OutputStream, std::string_view) override {}
    void flush() override {}
  };

  static bool contains(const std::vector<std::string>& list, const std::string& item) {
    return std::find(list.begin(), list.end(), item) != list.end();
  }
  void add(const std::string& stage, const std::string& name, std::optional<std::string> node,
           CheckStatus status, const std::string& reason) {
    report_.checks.push_back({stage, name, std::move(node), status, reason});
  }
  static void write_file(const std::string& path, const std::string& text) {
    std::ofstream out(path);
    if (!(out << text))
      throw Error(ErrorKind::Runtime, fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  }

  const DoctorOptions& options_;
  DoctorProgress progress_;
  DoctorReport report_;
  ClusterSpec cluster_;
  bool here_only_ = true;
  bool config_error_ = false;
  std::set<std::string> failed_;
  std::unique_ptr<SshTransport> transport_;
  std::unique_ptr<RemoteJob> remote_;
};

int run_doctor(const DoctorOptions& options) {
  for (const auto& list : {options.only, options.skip})
    for (const auto& s : list)
      if (std::find(kStages.begin(), kStages.end(), s) == kStages.end())
        throw Error(ErrorKind::Usage, fmt::format("unknown stage '{}'; the stages are {}", s,
                                                  fmt::join(kStages, ", ")));
  auto started = std::chrono::steady_clock::now();
  Doctor doctor(options);
  // The stages in order; each names the stages whose failure makes it pointless.
  doctor.stage("cluster", {}, [&] { doctor.check_cluster_file(); });        // the file is valid
  doctor.stage("ssh", {"cluster"}, [&] { doctor.check_ssh_reach(); });      // every node answers
  doctor.stage("topology", {"ssh"}, [&] { doctor.check_topology(); });      // GPUs as expected
  doctor.stage("network", {"ssh"}, [&] { doctor.check_network(); });        // every pair talks
  doctor.stage("launch", {"ssh"}, [&] { doctor.check_launch(); });          // ranks start and stop
  doctor.stage("smoke", {"launch"}, [&] { doctor.check_smoke(); });         // collectives work
  return doctor.finish(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
}

}  // namespace

CommandAction setup_doctor(CLI::App& app) {
  auto options = std::make_shared<DoctorOptions>();
  add_cluster_input_options(app, options->cluster);
  add_remote_flags(app, options->remote, true);
  app.add_option("--only", options->only, "run only these stages (cluster,ssh,topology,network,launch,smoke)")
      ->delimiter(',');
  app.add_option("--skip", options->skip, "skip these stages")->delimiter(',');
  app.add_flag("--strict", options->strict, "warnings fail too (exit 1)");
  app.add_option("--json", options->json_file, "write the report as JSON (share/doctor.schema.json)");
  app.add_option("--junit", options->junit_file, "write JUnit XML: one testcase per check and node");
  app.footer("Without -f, -H or --hostfile: this machine (topology, then a smoke test over its "
             "slots).\nExit status: 0 when every check passed (warnings allowed unless --strict), "
             "1 when one failed, 2 for usage or configuration errors.");
  return [options]() { return run_doctor(*options); };
}

}  // namespace muster::cli
