// muster agent: the per-node agent the head starts over SSH (not for direct use).
#include <unistd.h>

#include <cmath>
#include <memory>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "launcher/local/self.h"
#include "launcher/remote/agent.h"
#include "launcher/remote/slurm_call_back.h"

namespace muster::cli {

CommandAction setup_agent(CLI::App& app) {
  app.group("");  // hidden from --help: only muster itself runs it
  auto silence_s = std::make_shared<double>(
      std::chrono::duration<double>(kDefaultHeartbeatTimeout).count());
  app.add_option("--heartbeat-timeout", *silence_s, "seconds without the head before stopping")
      ->check(at_least(1));
  auto heads = std::make_shared<std::string>();
  app.add_option("--call-back", *heads, "ADDRESS:PORT,...: call the head back over TCP (the Slurm launcher)");
  return [silence_s, heads]() {
    skip_hwloc_plugins_the_agent_does_not_read();
    AgentSettings settings;
    settings.head_silence_limit = std::chrono::milliseconds(std::llround(*silence_s * 1000));
    if (heads->empty()) return run_agent([] { return HeadChannel{STDIN_FILENO, STDOUT_FILENO}; }, settings);
    const HeadCallBack call_back(*heads);
    return run_agent([&] {
      const int fd = call_back.connect(std::chrono::seconds(10));
      return HeadChannel{fd, fd};
    }, settings);
  };
}

}  // namespace muster::cli
