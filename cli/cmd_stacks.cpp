// muster stacks [JOB]: where a running job's ranks are, asked of its head on this machine;
// the job goes on.
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/stack_report_text.h"
#include "cli/terminal_output.h"
#include "launcher/error.h"
#include "launcher/job/control_socket.h"

namespace muster::cli {

struct StacksOptions {
  std::string job;
  bool json = false;
};

namespace {

// The head reads every node's ranks within its own limits; this covers them and the way back.
constexpr std::chrono::seconds kAnswerLimit{30};

int show_stacks(const StacksOptions& options) {
  std::string id = options.job;
  if (id.empty()) {
    const auto jobs = running_jobs();
    if (jobs.empty())
      throw Error(ErrorKind::Runtime, "no job of this user runs on this machine: 'muster stacks' asks the "
                                      "'muster run' that started the job, on the machine it runs on");
    if (jobs.size() > 1) {
      print_out(fmt::format("{} jobs run; name one: muster stacks JOB\n", jobs.size()));
      for (const auto& j : jobs) print_out(fmt::format("{}  {} ranks on {}  {}\n", j.id, j.ranks, j.hosts, j.command));
      return kUsageExit;
    }
    id = jobs.front().id;
  }
  const StackReport report = stack_report_from_json(ask_job_for_stacks(id, kAnswerLimit));
  if (options.json) print_out(stack_report_json(report).dump(2) + "\n");
  else print_out(stack_report_text(report));
  return 0;
}

}  // namespace

CommandAction setup_stacks(CLI::App& app) {
  auto options = std::make_shared<StacksOptions>();
  app.add_option("job", options->job, "the job's id, as 'muster stacks' lists them (needed when more than one runs)");
  app.add_flag("--json", options->json, "print the whole report as JSON: every thread's full call path");
  app.footer("Asks the 'muster run' of this user on this machine (through its socket in "
             "$XDG_RUNTIME_DIR/muster) to read every rank's stacks; the job keeps running.\n"
             "Example: muster stacks");
  return [options]() { return show_stacks(*options); };
}

}  // namespace muster::cli
