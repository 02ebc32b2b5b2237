// The table of subcommands: one entry, and one cmd_<name>.cpp, per subcommand.
#pragma once

#include <functional>
#include <vector>

namespace CLI {
class App;
}

namespace muster::cli {

// What a subcommand does once its flags are parsed; returns the exit status.
using CommandAction = std::function<int()>;

// One subcommand: `setup` declares its flags on `app` and returns its action.
struct Command {
  const char* name;
  const char* summary;
  CommandAction (*setup)(CLI::App& app);
  bool internal = false;  // started by muster itself, not listed in --help
};

// Every subcommand, in the order `muster --help` lists them.
const std::vector<Command>& all_commands();

// What runs on the nodes, and all that muster-node (the node binary the bundle ships)
// has: the agent and the probe ranks. all_commands() ends with them.
const std::vector<Command>& node_commands();

CommandAction setup_agent(CLI::App& app);
CommandAction setup_bundle(CLI::App& app);
CommandAction setup_doctor(CLI::App& app);
CommandAction setup_exec(CLI::App& app);
CommandAction setup_hostlist(CLI::App& app);
CommandAction setup_ping(CLI::App& app);
CommandAction setup_plan(CLI::App& app);
CommandAction setup_run(CLI::App& app);
CommandAction setup_smoke(CLI::App& app);
CommandAction setup_smoke_rank(CLI::App& app);
CommandAction setup_topo(CLI::App& app);

}  // namespace muster::cli
