// muster health: this node's health checks alone, with no SSH and no ranks: what Slurm's
// HealthCheckProgram, a prolog or a cron job runs. The table (or JSON, JUnit, Prometheus) as
// doctor writes it, and NHC's conventions: exit 0 healthy, 1 sick, with one line of reason.
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/report_flags.h"
#include "cli/terminal_output.h"
#include "launcher/error.h"
#include "launcher/job/doctor.h"
#include "launcher/job/health_check.h"
#include "launcher/job/node_drain.h"
#include "launcher/remote/health_report.h"
#include "topology/health/counter_baseline.h"

namespace muster::cli {

struct HealthOptions {
  ClusterInput cluster;
  std::string fsroot;  // empty: this node
  double timeout_s = 60;
  bool drain = false;
  bool accept_counters = false;
  bool record = false;
  bool stress = false;
  ReportFlags reports{"health"};
};

namespace {

// The first check of this status, if any.
const Check* first_of(const DoctorReport& report, CheckStatus status) {
  for (const auto& c : report.checks)
    if (c.status == status) return &c;
  return nullptr;
}

// The first check that could not be made (a health finding of "unknown"), if any.
const Check* first_unknown(const DoctorReport& report) {
  for (const auto& c : report.checks)
    if (c.health && c.health->status == HealthStatus::Unknown) return &c;
  return nullptr;
}

// A check as the one line NHC gives: "GPU1 0000:2a:00.0 ...: PCIe link x8 ...".
std::string one_line(const Check& c) { return c.health ? c.health->summary() : c.reason; }

}  // namespace

CommandAction setup_health(CLI::App& app) {
  auto options = std::make_shared<HealthOptions>();
  app.add_option("-f,--cluster,--file", options->cluster.cluster_file,
                 "take the expectations from this cluster file's 'expect:' (its nodes are not reached)")
      ->type_name("FILE")
      ->check(not_empty("-f cluster.yaml", "to check with no expectations"))
      ->check(file_not_option("cluster.yaml", false));
  app.add_option("--fsroot", options->fsroot,
                 "read /sys, /proc and the kernel log (dev/kmsg) under DIR: a snapshot of a node")
      ->type_name("DIR")
      ->check(file_not_option("snapshot/", false));
  app.add_option("--timeout", options->timeout_s,
                 "fail, naming the check that hangs, when the checks take longer (default 60)")
      ->type_name("S")
      ->check(in_range(0.1, 86400));
  app.add_flag("--drain", options->drain,
               "as Slurm's health check: drain this node (SLURMD_NODENAME) when sick, with the first "
               "finding as its reason; resume it once healthy if muster drained it");
  app.add_flag("--accept-counters", options->accept_counters,
               "after a repair (a GPU reset, a reseated card): take this boot's AER and Xid counts as the "
               "baseline, so that later runs judge only what is new");
  app.add_flag("--record", options->record,
               "as NHC's nhc-genconf: record this healthy node's GPU count and model, PCIe links and active "
               "IB ports as what later runs expect (where the cluster file expects nothing)");
  app.add_flag("--stress", options->stress,
               "also load every GPU (at most 10 s): host copies, memory bandwidth, copies between GPUs and a "
               "GEMM, each judged against the GPU's peers and its links; a slow GPU fails, named");
  add_report_flags(app, options->reports);
  app.footer("Checks PCIe links, InfiniBand ports, GPUs (NVML), Xids in the kernel log and software.\n"
             "Exit status: 0 healthy (warnings and unknowns allowed unless --strict), 1 a check failed,\n"
             "2 for usage or configuration errors. On failure the reason is one line on stderr, "
             "\"muster: health: FAIL ...\": the last line, or with --drain the line before what "
             "became of the node.");
  return [options]() {
    check_report_flags(options->reports);
    if (options->stress && !options->fsroot.empty())
      throw Error(ErrorKind::Usage, "--stress measures this node's GPUs, --fsroot reads a snapshot of a node: give one "
                                    "of them");
    if (options->drain && !options->fsroot.empty())
      throw Error(ErrorKind::Usage, "--drain acts on this node, --fsroot reads a snapshot: give one of them");
    // Before the checks: a site without scontrol hears it at once, not after them.
    auto slurm = options->drain ? scontrol_node_control(std::chrono::seconds(10)) : nullptr;
    std::error_code ec;
    if (!options->fsroot.empty() && !std::filesystem::is_directory(options->fsroot, ec))
      throw Error(ErrorKind::Usage, fmt::format("--fsroot {}: not a directory; give the root of a node's "
                                                "snapshot (with sys/, proc/ and dev/kmsg under it)",
                                                options->fsroot));
    const auto deadline = std::chrono::milliseconds(static_cast<long long>(options->timeout_s * 1000));
    if (options->accept_counters) {
      const std::string root = options->fsroot.empty() ? health_root_of_this_node() : options->fsroot;
      const AcceptedCounters accepted = accept_this_nodes_counters(root, deadline);
      if (!accepted.saved) throw Error(ErrorKind::Runtime, "--accept-counters: " + accepted.why_not);
      print_note(fmt::format("health: accepted {} AER and Xid count{} of boot {} as the baseline ({})",
                             accepted.counts, accepted.counts == 1 ? "" : "s", accepted.boot_id, health_state_dir()));
    }
    if (options->record) {
      const std::string root = options->fsroot.empty() ? health_root_of_this_node() : options->fsroot;
      const RecordedNode recorded = record_this_node(
          root, options->fsroot.empty() ? GpuLibrariesAsked::Yes : GpuLibrariesAsked::NotForASnapshot, deadline);
      if (!recorded.saved) throw Error(ErrorKind::Runtime, "--record: " + recorded.why_not);
      print_note(fmt::format("health: recorded {} ({})", node_record_text(recorded.record), health_state_dir()));
    }
    DoctorReport report = run_node_health(options->cluster, options->fsroot, deadline, options->stress);
    const int status = deliver_report(report, options->reports);
    // NHC's convention: one line that says why, for a drain reason or a log.
    const Check* failure = first_of(report, CheckStatus::Fail);
    if (failure) print_note(fmt::format("health: FAIL {}: {}", failure->node.value_or(""), one_line(*failure)));
    if (slurm && !report.config_error) {
      // --strict makes a warning sick too, as it makes the exit status 1.
      const Check* sick = failure ? failure : status == 1 ? first_of(report, CheckStatus::Warn) : nullptr;
      const Check* unknown = first_unknown(report);
      const DrainOutcome outcome = drain_or_resume(*slurm, this_slurm_node(),
                                                   sick ? std::optional(one_line(*sick)) : std::nullopt,
                                                   unknown ? std::optional(one_line(*unknown)) : std::nullopt);
      if (!outcome.message.empty()) print_note("health: " + outcome.message);
    }
    return status;
  };
}

}  // namespace muster::cli
