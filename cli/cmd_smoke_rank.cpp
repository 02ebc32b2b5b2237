// muster smoke-rank: one probe rank of `muster smoke` (started by muster, not by hand).
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/terminal_output.h"
#include "launcher/job/smoke_rank.h"

namespace muster::cli {

CommandAction setup_smoke_rank(CLI::App& app) {
  app.group("");  // hidden: muster smoke starts it on every slot
  return []() {
    try {
      run_smoke_rank(Environment::current(), [](const std::string& line) { print_out(line + "\n"); });
      return 0;
    } catch (const std::exception& e) {
      print_error(e.what());
      return smoke_rank_exit_code(e);
    }
  };
}

}  // namespace muster::cli
