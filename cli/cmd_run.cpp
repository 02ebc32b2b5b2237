// muster run: start the planned ranks, stream their output, and report how the job ended.
#include <map>
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/cluster_input.h"
#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/job_report.h"
#include "cli/remote_options.h"
#include "cli/stack_report_text.h"
#include "cli/terminal_output.h"
#include "launcher/cluster/cluster_input.h"
#include "launcher/error.h"
#include "launcher/job/launch.h"
#include "launcher/cluster/hostlist.h"
#include "launcher/job/restarts.h"

namespace muster::cli {

struct RunOptions {
  ClusterInput cluster;
  RemoteFlags remote;
  JobOptions job;
  TagStyle tag = TagStyle::Rank;
  bool report_bindings = false;
  CLI::Option* mpi_flag = nullptr;  // whether --mpi was given: launch.mpi otherwise
  CLI::Option* restarts_flag = nullptr;  // whether --restarts was given: launch.restarts otherwise
  SpareFlags spares;
  bool json = false;
};

namespace {

// The ranks' lines, and the stacks report between them when the head reads the ranks' stacks.
class RunOutput : public TaggedOutput {
 public:
  using TaggedOutput::TaggedOutput;
  void stacks(const StackReport& report) override {
    flush();
    print_note_raw(stack_report_text(report));
  }
};

int run_job(RunOptions& options) {
  if (options.job.command.empty() || options.job.command.front().empty())
    throw Error(ErrorKind::Usage, fmt::format("{}, as in 'muster run -n 4 -- python3 train.py'",
                                              options.job.command.empty() ? "no command to run: put it after '--'"
                                                                          : "the command to run is an empty word: name a program"));
  options.job.ranks = options.cluster.ranks;
  options.job.map_by = options.cluster.map_by;
  ClusterSpec cluster = load_cluster(options.cluster);
  if (options.mpi_flag->count() == 0 && cluster.launch.mpi) options.job.mpi = mpi_choices().at(*cluster.launch.mpi);
  if (options.restarts_flag->count() == 0 && cluster.launch.restarts) options.job.restarts = *cluster.launch.restarts;
  hold_spares(cluster, options.spares);
  if (options.job.drain_bad && options.job.restarts == 0)
    throw Error(ErrorKind::Usage, "--drain-bad drains the nodes --restarts leaves out: give --restarts N as well");
  if (options.job.drain_bad && cluster.launcher != Launcher::Slurm)
    throw Error(ErrorKind::Usage, "--drain-bad drains nodes in Slurm, and this job's nodes are reached over SSH: "
                                  "run it inside a Slurm allocation (salloc, sbatch) or leave --drain-bad out");
  ClusterContext context(std::move(cluster), options.remote.settings());
  refuse_this_machine_listed_twice(context);
  LaunchedJob job = launch_job(context, options.job, [&](const RankPlan& plan) {
    std::vector<std::string> hosts;
    for (const auto& r : plan.ranks) hosts.push_back(r.host);
    return std::make_unique<RunOutput>(options.tag, hosts, options.report_bindings);
  });
  report_job_end(job, options.job.timeout_s);
  if (options.job.restarts > 0) report_attempts(job);
  if (options.json) print_attempts_json(job);
  return job.result.exit_code();
}

}  // namespace

CommandAction setup_run(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  add_cluster_input_options(app, options->cluster);
  add_remote_flags(app, options->remote, RemoteUse::Agents);
  app.add_option("-x,--export", options->job.exports,
                 "add VAR=VALUE (or VAR, copied from muster's environment) to every rank")
      ->allow_extra_args(false);
  add_choice(app, "--tag", options->tag, tag_styles(), "prefix of each output line", "rank");
  add_choice(app, "--bind", options->job.bind, bind_choices(),
             "core: each rank its share of the cores near its GPU (or of a NUMA node); "
             "numa: the whole NUMA node; none", "core");
  options->mpi_flag = add_choice(app, "--mpi", options->job.mpi, mpi_choices(),
             "what each rank's MPI library is served so that the ranks start as one world: pmix "
             "(Open MPI, mpi4py), as srun --mpi=pmix; pmi1 (MPICH, Intel MPI), as Hydra; auto: "
             "both where each can be; none. The cluster file's launch.mpi, when this is not given",
             "auto");
  app.add_option("--chdir", options->job.chdir,
                 "start every rank in DIR (relative: to this directory), as srun -D; a node "
                 "without it starts none of its ranks. Default: launch.chdir, else this "
                 "directory, or $HOME on the nodes that lack it")
      ->option_text("DIR");
  app.add_flag("--report-bindings", options->report_bindings,
               "print each rank's CPUs, NUMA node and GPU before starting");
  app.add_option("--grace", options->job.grace_s,
                 "seconds between SIGTERM and SIGKILL when tearing the job down")
      ->check(in_range(0, kLongestWaitSeconds))
      ->capture_default_str();
  app.add_option("--timeout", options->job.timeout_s,
                 "stop the job after this many seconds (0: never); first every rank's stacks are read "
                 "and the rank that is not where the others wait is named")
      ->check(in_range(0, kLongestWaitSeconds));
  app.add_option("--stall", options->job.stall_s,
                 "when no rank has written a line for this many seconds, read every rank's stacks "
                 "once and say which rank is not where the others wait; the job goes on (0: never)")
      ->check(in_range(0, kLongestWaitSeconds));
  options->restarts_flag =
      app.add_option("--restarts", options->job.restarts,
                     "start the job again up to N times after a rank fails, a node is lost or a start fails: "
                     "a node lost or failing a quick health check is left out and its ranks move to a spare; "
                     "on healthy nodes the job restarts in place. Default: launch.restarts, else 0")
          ->option_text("N")
          ->check(in_range(0, kMaxRestarts, true));
  add_spare_flags(app, options->spares,
                  "hold the last K nodes of the cluster back as spares for --restarts (the cluster file's "
                  "'spare: true' says the same per node)");
  app.add_flag("--drain-bad", options->job.drain_bad,
               "under Slurm, drain a node that --restarts leaves out, with why (as health --drain; a node "
               "an administrator drained is left as it is)");
  app.add_flag("--json", options->json,
               "at the end, print the attempts on stdout as one JSON object ({\"events\": [...]}), "
               "after the ranks' output");
  app.add_option("command", options->job.command, "the command each rank runs, after --");
  app.footer("Example: muster run -n 4 -- python3 train.py --epochs 1\n"
             "Exit status: 0 when every rank exits 0; else the first failed rank's status "
             "(128+N for signal N); 124 on --timeout or a Slurm time limit; 127 when the command is "
             "not found, 126 when it is not executable; 255 when a node could not be reached or was "
             "lost; 2 for usage or configuration errors.");
  return [options]() { return run_job(*options); };
}

}  // namespace muster::cli
