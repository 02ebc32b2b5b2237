#include "cli/commands.h"

namespace muster::cli {

const std::vector<Command>& node_commands() {
  static const std::vector<Command> commands = {
      {"agent", "the per-node agent that muster starts over SSH", setup_agent, true},
      {"smoke-rank", "one probe rank of muster smoke", setup_smoke_rank, true},
  };
  return commands;
}

}  // namespace muster::cli
