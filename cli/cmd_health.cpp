// muster health: this node's health checks alone, with no SSH and no ranks: what Slurm's
// HealthCheckProgram, a prolog or a cron job runs. The table (or JSON, JUnit, Prometheus) as
// doctor writes it, and NHC's conventions: exit 0 healthy, 1 sick, with one line of reason.
#include <chrono>
#include <filesystem>
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/report_flags.h"
#include "cli/terminal_output.h"
#include "launcher/error.h"
#include "launcher/job/doctor.h"

namespace muster::cli {

struct HealthOptions {
  ClusterInput cluster;
  std::string fsroot;  // empty: this node
  double timeout_s = 60;
  ReportFlags reports;
};

CommandAction setup_health(CLI::App& app) {
  auto options = std::make_shared<HealthOptions>();
  app.add_option("-f,--file", options->cluster.cluster_file,
                 "take the expectations from this cluster file's 'expect:' (its nodes are not reached)")
      ->type_name("FILE")
      ->check(file_not_option("cluster.yaml", false));
  app.add_option("--fsroot", options->fsroot,
                 "read /sys, /proc and the kernel log (dev/kmsg) under DIR: a snapshot of a node")
      ->type_name("DIR")
      ->check(file_not_option("snapshot/", false));
  app.add_option("--timeout", options->timeout_s,
                 "fail, naming the check that hangs, when the checks take longer (default 60)")
      ->type_name("S")
      ->check(CLI::Range(0.1, 86400.0));
  add_report_flags(app, options->reports);
  app.footer("Checks PCIe links, InfiniBand ports, GPUs (NVML), Xids in the kernel log and software.\n"
             "Exit status: 0 healthy (warnings and unknowns allowed unless --strict), 1 a check failed,\n"
             "2 for usage or configuration errors. On failure the last line of stderr is the reason.");
  return [options]() {
    check_report_flags(options->reports);
    std::error_code ec;
    if (!options->fsroot.empty() && !std::filesystem::is_directory(options->fsroot, ec))
      throw Error(ErrorKind::Usage, fmt::format("--fsroot {}: not a directory; give the root of a node's "
                                                "snapshot (with sys/, proc/ and dev/kmsg under it)",
                                                options->fsroot));
    DoctorReport report = run_node_health(
        options->cluster, options->fsroot,
        std::chrono::milliseconds(static_cast<long long>(options->timeout_s * 1000)));
    const int status = deliver_report(report, options->reports);
    // NHC's convention: one line that says why, for a drain reason or a log.
    for (const auto& c : report.checks)
      if (c.status == CheckStatus::Fail) {
        print_note(fmt::format("health: FAIL {}: {}", c.node.value_or(""), c.health ? c.health->summary() : c.reason));
        break;
      }
    return status;
  };
}

}  // namespace muster::cli
