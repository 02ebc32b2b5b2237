// `muster agent`: what the head runs on every node over SSH. It reports the node, receives
// the node's launch spec, starts the ranks through the local launcher, streams their output
// and exits back, and stops them when the head says so or can no longer be heard.
#pragma once

#include <chrono>

namespace muster {

// How long an agent waits without hearing the head before it stops its ranks. The head
// sends a heartbeat every second, so a cut network is noticed within this much.
inline constexpr std::chrono::seconds kHeadSilenceLimit{5};

// Runs the agent protocol on `in_fd` (from the head) and `out_fd` (to the head).
// Returns the process exit status.
int run_agent(int in_fd, int out_fd);

}  // namespace muster
