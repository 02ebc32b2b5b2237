// muster doctor: every stage in order, each check pass / warn / fail / skip with a reason;
// shown live on a terminal, then as a table, and written as JSON and JUnit on request.
#include <unistd.h>

#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/cluster_input.h"
#include "cli/commands.h"
#include "cli/doctor_progress.h"
#include "cli/remote_options.h"
#include "cli/report_flags.h"
#include "launcher/job/doctor.h"

namespace muster::cli {

struct DoctorOptions {
  DoctorRequest request;
  RemoteFlags remote;
  ReportFlags reports{"doctor"};
};

CommandAction setup_doctor(CLI::App& app) {
  auto options = std::make_shared<DoctorOptions>();
  add_cluster_input_options(app, options->request.cluster);
  add_remote_flags(app, options->remote, RemoteUse::Agents);
  app.add_option("--only", options->request.only,
                 "run only these stages (cluster,ssh,topology,health,network,launch,smoke)")
      ->delimiter(',');
  app.add_option("--skip", options->request.skip, "skip these stages")->delimiter(',');
  app.add_flag("--stress", options->request.stress,
               "the health stage also loads every GPU of every node (at most 10 s a node), as muster health "
               "--stress; the cluster file's checks.stress: true does it too");
  add_report_flags(app, options->reports);
  app.footer("Without -f, -H or --hostfile: this machine (topology, health, then a smoke test over "
             "its slots).\nExit status: 0 when every check passed (warnings allowed unless --strict), "
             "1 when one failed, 2 for usage or configuration errors.");
  return [options]() {
    check_report_flags(options->reports);
    options->request.remote = options->remote.settings();
    DoctorProgress progress(isatty(STDERR_FILENO) != 0);
    return deliver_report(run_doctor(options->request, progress), options->reports);
  };
}

}  // namespace muster::cli
