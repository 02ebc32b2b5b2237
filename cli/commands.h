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

// This executable's subcommands, in the order --help lists them: muster's (commands.cpp)
// end with the node's; muster-node, the node binary the bundle ships, has only the node's
// (node_commands.cpp). Each executable links one of the two files.
const std::vector<Command>& commands();

CommandAction setup_agent(CLI::App& app);
CommandAction setup_smoke_rank(CLI::App& app);

// What runs on the nodes, started by muster itself: the agent and the probe ranks.
inline const std::vector<Command>& node_commands() {
  static const std::vector<Command> node = {
      {"agent", "the per-node agent that muster starts over SSH", setup_agent, true},
      {"smoke-rank", "one probe rank of muster smoke", setup_smoke_rank, true},
  };
  return node;
}

CommandAction setup_bundle(CLI::App& app);
CommandAction setup_doctor(CLI::App& app);
CommandAction setup_exec(CLI::App& app);
CommandAction setup_health(CLI::App& app);
CommandAction setup_hostlist(CLI::App& app);
CommandAction setup_ping(CLI::App& app);
CommandAction setup_plan(CLI::App& app);
CommandAction setup_run(CLI::App& app);
CommandAction setup_smoke(CLI::App& app);
CommandAction setup_stacks(CLI::App& app);
CommandAction setup_topo(CLI::App& app);

}  // namespace muster::cli
