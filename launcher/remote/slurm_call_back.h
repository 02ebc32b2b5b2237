// The node's side of agents started through Slurm (see slurm_launcher.h for the head's): the
// agent srun started calls back to the head over TCP and proves it holds the session's
// secret. Kept apart so that what runs on a node carries none of the head's code.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace muster {

// The environment variable that carries the session's secret from srun to the agents.
inline constexpr const char* kAgentSecretVariable = "MUSTER_AGENT_SECRET";
// What an agent's proof is bound to, so that no other muster server accepts it.
inline constexpr std::string_view kAgentCallBackPurpose = "muster agent calling back";

// An agent's way back to the head, taken from its command line and environment. Made on
// the agent's main thread before it starts any other: it removes the secret from the
// environment (so that no rank inherits it), and that must not race another thread's getenv.
class HeadCallBack {
 public:
  // `heads`: "ADDRESS:PORT,..."; the secret comes from kAgentSecretVariable. Throws
  // Error(Runtime) when it is not set.
  explicit HeadCallBack(const std::string& heads);

  // Connects to the first of the heads that answers within `limit`, proves the secret and
  // names this node. Returns the connected socket. Throws Error(Runtime) saying what was
  // tried.
  int connect(std::chrono::milliseconds limit) const;

 private:
  std::string heads_, node_, secret_;
};

}  // namespace muster
