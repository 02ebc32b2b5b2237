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

// Connects to the first of `heads` ("ADDRESS:PORT,...") that answers within `limit`, proves
// the secret in kAgentSecretVariable (which it then removes from its environment, so that no
// rank inherits it) and names its node. Returns the connected socket. Throws Error(Runtime)
// saying what was tried.
int call_back_head(const std::string& heads, std::chrono::milliseconds limit);

}  // namespace muster
