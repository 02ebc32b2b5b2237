#include "launcher/job/exec_here.h"

#include "launcher/error.h"
#include "launcher/local/local_job.h"
#include "launcher/local/posix_spawner.h"
#include "launcher/local/shutdown_signals.h"

namespace muster {
namespace {

// Each node's lines to the sink, or kept with exec_on_nodes' limit.
class ExecOutput : public JobOutput {
 public:
  ExecOutput(std::vector<NodeExecResult>& results, const ExecLineSink& sink)
      : results_(results), sink_(sink) {}

  void line(int node, OutputStream stream, std::string_view text) override {
    NodeExecResult& r = results_[size_t(node)];
    if (sink_) return sink_(r.host, stream, text);
    r.keep_line(stream, text);
  }
  void flush() override {}
  void rank_ended(int node, const ExitStatus& status) override {
    results_[size_t(node)].status = status.shell_code();
  }

 private:
  std::vector<NodeExecResult>& results_;
  const ExecLineSink& sink_;
};

}  // namespace

std::vector<NodeExecResult> exec_here(const ClusterSpec& cluster, const std::vector<std::string>& argv,
                                      const ExecLineSink& sink) {
  ShutdownSignals signals;  // from here on Ctrl-C stops the commands before muster ends
  const Environment env = Environment::current();
  check_command_runs(argv.front(), env);

  std::vector<NodeExecResult> results;
  std::vector<RankProcess> commands;
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    results.push_back({cluster.nodes[i].host, -1, "", "", false, std::nullopt});
    RankProcess command;
    command.rank = int(i);
    command.spec.argv = argv;
    command.spec.env = env;
    commands.push_back(std::move(command));
  }
  TeardownPolicy policy;  // pdsh's: each node's command ends in its own time, leaving what it started
  policy.failure_stops_the_others = false;
  policy.stop_what_ranks_leave = false;
  ExecOutput output(results, sink);
  PosixSpawner spawner;
  JobResult job = run_local_job(spawner, commands, policy, output, {signals.fd()}, {});
  if (job.end == JobEnd::Interrupted)
    throw Interrupted(job.received_signal, "and stopped the command");
  if (job.end == JobEnd::StartFailed)  // a race with check_command_runs: the file changed since
    throw Error(job.exit_code() == 126 ? ErrorKind::CommandNotExecutable : ErrorKind::CommandNotFound,
                job.start_error);
  return results;
}

}  // namespace muster
