#include "cli/commands.h"

namespace muster::cli {

// muster-node's: the node's commands and nothing else.
const std::vector<Command>& commands() { return node_commands(); }

}  // namespace muster::cli
