// Agents started through Slurm: inside an allocation, every node's agent starts in one srun
// step (one task per node), and each calls back to the head over TCP, proving it holds a
// secret made for this session (an HMAC challenge; the secret reaches the agents in srun's
// environment, never on a command line and never over the network). From then on the TCP
// connection is the agent's channel, exactly as the SSH channel is. srun's own words (a
// node it cannot reach, a task that died, a step cancelled or out of time) are kept and
// told with the node they name.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/remote/agent_launcher.h"
#include "launcher/remote/slurm_call_back.h"

namespace muster {

// Starts the agents of `cluster` (nodes in an allocation muster runs inside) as one srun step.
std::shared_ptr<AgentLauncher> make_slurm_agent_launcher(const ClusterSpec& cluster);

// What the srun step said about `host`: its lines that name it, else (with LastLines, once
// the step has ended) its last lines; "" when it said nothing. Exported for tests of the wording.
enum class Fallback { None, LastLines };
std::string srun_words_about(const std::string& output, const std::string& host,
                             Fallback fallback = Fallback::LastLines);

}  // namespace muster
