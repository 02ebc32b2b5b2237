// muster agent: the per-node agent the head starts over SSH (not for direct use).
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "launcher/remote/agent.h"

namespace muster::cli {

CommandAction setup_agent(CLI::App& app) {
  app.group("");  // hidden from --help: only muster itself runs it
  return []() { return run_agent(STDIN_FILENO, STDOUT_FILENO); };
}

}  // namespace muster::cli
