// `muster agent`: what the head runs on every node of a session. It reports the node,
// answers the head's requests (probes, clocks, ports), and runs each job the head sends
// through the local launcher, streaming the ranks' output and exits back. It stops a job's
// ranks when the head says so, when its channel closes, or when the head falls silent.
#pragma once

#include <chrono>

namespace muster {

// How long either side waits without hearing the other before it takes it for lost. Both
// send a heartbeat every second, so a cut network is noticed within this much.
inline constexpr std::chrono::seconds kDefaultHeartbeatTimeout{10};

struct AgentSettings {
  std::chrono::milliseconds head_silence_limit = kDefaultHeartbeatTimeout;
};

// Runs the agent protocol on `in_fd` (from the head) and `out_fd` (to the head) until the
// head says goodbye or is lost. Returns the process exit status.
int run_agent(int in_fd, int out_fd, const AgentSettings& settings);

}  // namespace muster
