// muster: parse the command line, run one subcommand, print errors once.
#include <sys/prctl.h>

#include <algorithm>
#include <csignal>
#include <iostream>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/help_format.h"
#include "cli/usage_errors.h"
#include "cli/terminal_output.h"
#include "launcher/error.h"
#include "launcher/local/self.h"

int main(int argc, char** argv) {
  using namespace muster;
  // A closed pipe on our stdout (muster ... | head) must not kill muster before teardown.
  signal(SIGPIPE, SIG_IGN);
  // Probe ranks are started through /proc/self/exe, which the kernel would name "exe" in
  // ps and top: every muster process is "muster", its role in its arguments.
  prctl(PR_SET_NAME, "muster");
  note_how_muster_started();

  CLI::App app{"muster: bring up distributed jobs on GPU clusters and check that the "
               "cluster will pass muster", "muster"};
  app.set_version_flag("--version", fmt::format("muster {}\nbuild {}\nbuilt with {}", MUSTER_VERSION,
                                               muster_build_id(), MUSTER_LIBRARY_VERSIONS),
                       "print muster's version, build id and libraries, and exit");
  // Before the subcommands, which inherit both.
  app.formatter(cli::help_formatter());
  app.set_help_flag("-h,--help", "print this help and exit");
  app.require_subcommand(1);
  app.fallthrough(false);

  cli::CommandAction action;
  std::vector<std::string> listed;
  const auto& commands = cli::commands();
  for (const auto& command : commands) {
    CLI::App* sub = app.add_subcommand(command.name, command.summary);
    if (command.internal) sub->group("");  // hidden from --help
    else listed.push_back(command.name);
    auto set_up = command.setup(*sub);
    sub->callback([&action, set_up] { action = set_up; });
  }
  if (listed.empty())  // muster-node's are all internal: name them rather than none
    for (const auto& command : commands) listed.push_back(command.name);

  // Where to start, for someone who has never run muster: the first step, one example, and
  // where the rest is. (muster-node's commands are the agent's; it has no first step.)
  if (std::any_of(commands.begin(), commands.end(), [](const auto& c) { return !c.internal; }))
    app.footer("First step: muster doctor -f cluster.yaml, which checks a cluster end to end "
               "(SSH, topology, health, network, a job), or -H host1,host2 instead of a file.\n"
               "Example: muster run -f cluster.yaml -- python3 train.py\n"
               "More: muster help COMMAND (or muster COMMAND --help), man muster, "
               "man muster-cluster for the cluster file.");

  // git's and pip's habit: `muster help run` is `muster run --help`, parsed as that.
  std::vector<char*> help_argv;
  if (argc > 1 && std::string(argv[1]) == "help") {
    if (argc > 3) {
      cli::print_error("'muster help' takes one command, as in 'muster help run'");
      return cli::kUsageExit;
    }
    static char help_flag[] = "--help";
    help_argv = {argv[0]};
    if (argc == 3) help_argv.push_back(argv[2]);
    help_argv.push_back(help_flag);
    if (argc == 3 && (std::string(argv[2]).empty() || argv[2][0] == '-' ||
                      std::find(listed.begin(), listed.end(), argv[2]) == listed.end())) {
      cli::print_error(cli::explain_unknown_command(argv[2], listed));
      return cli::kUsageExit;
    }
    argc = int(help_argv.size());
    argv = help_argv.data();
  }
  // The command comes first: muster's flags belong to its subcommands.
  const std::string first = argc > 1 ? argv[1] : "";
  if (argc > 1 && first.empty()) {
    cli::print_error(cli::explain_unknown_command(first, listed));
    return cli::kUsageExit;
  }
  if (first.empty() || (first[0] == '-' && first != "-h" && first != "--help" && first != "--version")) {
    if (auto guess = cli::misspelt_top_option(first)) {
      cli::print_error(*guess);
      return cli::kUsageExit;
    }
    cli::print_error(fmt::format("{}: the command comes first, as in 'muster run -n 2 -- CMD'; "
                                 "the commands are {}",
                                 first.empty() ? "no command given" : "'" + first + "'",
                                 fmt::join(listed, ", ")));
    return cli::kUsageExit;
  }
  if (auto habit = cli::habit_to_correct(app, argc, argv)) {
    cli::print_error(*habit);
    return cli::kUsageExit;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    cli::print_error(cli::explain_parse_error(app, e, argc, argv, listed));
    return cli::kUsageExit;
  }

  show_as_muster(argc, argv);  // the options are parsed: argv's memory is free to reuse
  try {
    return action();
  } catch (const Interrupted& e) {
    // Whatever ran was stopped; connections and agents still opening go with the process.
    // Its threads may be in the middle of a handshake, so no destructor waits for them.
    cli::print_note(fmt::format("interrupted by SIG{} {}", sigabbrev_np(e.signal()), e.what()));
    std::quick_exit(128 + e.signal());
  } catch (const Error& e) {
    for (const auto& message : e.messages()) cli::print_error(message);
    return exit_status_of(e.kind());
  } catch (const std::exception& e) {
    cli::print_error(e.what());
    return 1;
  }
}
