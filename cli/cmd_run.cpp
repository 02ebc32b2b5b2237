// muster run: start the planned ranks, stream their output, and report how the job ended.
#include <memory>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/job_launch.h"
#include "cli/terminal_output.h"
#include "launcher/error.h"

namespace muster::cli {

struct RunOptions {
  JobLaunchOptions launch;
  std::string tag = "rank";
  std::string bind = "core";
};

namespace {

TagStyle tag_style_of(const std::string& tag) {
  if (tag == "none") return TagStyle::None;
  if (tag == "host") return TagStyle::Host;
  if (tag == "host-rank") return TagStyle::HostRank;
  return TagStyle::Rank;
}

int run_job(RunOptions& options) {
  if (options.launch.command.empty())
    throw Error(ErrorKind::Usage, "no command to run: put it after '--', as in "
                                  "'muster run -n 4 -- python3 train.py'");
  options.launch.bind = bind_policy_from_name(options.bind);
  LaunchedJob job = launch_job(options.launch, [&](const RankPlan& plan) {
    std::vector<std::string> hosts;
    for (const auto& r : plan.ranks) hosts.push_back(r.host);
    return std::make_unique<TaggedOutput>(tag_style_of(options.tag), hosts,
                                          options.launch.report_bindings);
  });
  report_job_end(job.result, job.plan, options.launch.timeout_s);
  return job.result.exit_code();
}

}  // namespace

CommandAction setup_run(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  JobLaunchOptions& launch = options->launch;
  add_cluster_input_options(app, launch.cluster);
  add_remote_flags(app, launch.remote, true);
  app.add_option("-x,--export", launch.exports,
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
  app.add_flag("--report-bindings", launch.report_bindings,
               "print each rank's CPUs, NUMA node and GPU before starting");
  app.add_option("--grace", launch.grace_s,
                 "seconds between SIGTERM and SIGKILL when tearing the job down")
      ->check(at_least(0))
      ->capture_default_str();
  app.add_option("--timeout", launch.timeout_s, "stop the job after this many seconds (0: never)")
      ->check(at_least(0));
  app.add_option("command", launch.command, "the command each rank runs, after --");
  app.footer("Example: muster run -n 4 -- python3 train.py --epochs 1\n"
             "Exit status: 0 when every rank exits 0; else the first failed rank's status "
             "(128+N for signal N); 124 on --timeout; 2 for usage or configuration errors.");
  return [options]() { return run_job(*options); };
}

}  // namespace muster::cli
