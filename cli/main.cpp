// muster: parse the command line, run one subcommand, print errors once.
#include <csignal>
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/terminal_output.h"
#include "launcher/error.h"

int main(int argc, char** argv) {
  using namespace muster;
  // A closed pipe on our stdout (muster ... | head) must not kill muster before teardown.
  signal(SIGPIPE, SIG_IGN);

  CLI::App app{"muster: bring up distributed jobs on GPU clusters and check that the "
               "cluster will pass muster", "muster"};
  app.set_version_flag("--version", "muster " MUSTER_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);

  cli::CommandAction action;
  for (const auto& command : cli::all_commands()) {
    CLI::App* sub = app.add_subcommand(command.name, command.summary);
    auto set_up = command.setup(*sub);
    sub->callback([&action, set_up] { action = set_up; });
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
    cli::print_error(fmt::format("{}; see 'muster --help'", e.what()));
    return cli::kUsageExit;
  }

  try {
    return action();
  } catch (const Error& e) {
    for (const auto& message : e.messages()) cli::print_error(message);
    return e.kind() == ErrorKind::Runtime ? 1 : cli::kUsageExit;
  } catch (const std::exception& e) {
    cli::print_error(e.what());
    return 1;
  }
}
