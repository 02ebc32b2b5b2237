// `muster agent`: what the head runs on every node of a session. It reports the node,
// answers the head's requests (probes, clocks, ports), and runs each job the head sends
// through the local launcher, streaming the ranks' output and exits back. It stops a job's
// ranks when the head says so, when its channel closes, or when the head falls silent.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "launcher/remote/launch_spec.h"
#include "topology/topology.h"

namespace muster {

// How long either side waits without hearing the other before it takes it for lost. Both
// send a heartbeat every second, so a cut network is noticed within this much.
inline constexpr std::chrono::seconds kDefaultHeartbeatTimeout{10};

struct AgentSettings {
  std::chrono::milliseconds head_silence_limit = kDefaultHeartbeatTimeout;
};

// The agent's ends of its channel to the head: over SSH its stdin and stdout, under Slurm
// the socket it called back on.
struct HeadChannel {
  int in_fd = -1;   // from the head
  int out_fd = -1;  // to the head
};

// Runs the agent protocol on the channel `reach_head` returns until the head says goodbye or
// is lost. `reach_head` runs on a thread of its own while the agent looks at its node; when
// it throws, so does run_agent. Returns the process exit status.
int run_agent(const std::function<HeadChannel()>& reach_head, const AgentSettings& settings);

// What an agent tells the head of this node in its hello: identity, GPUs, addresses, free
// ports, and where its probe server listens (0 and "" where there is none).
NodeHello describe_this_node(const Topology& topology, int probe_port, const std::string& probe_secret);

// Whether PMIx's server may be lent the agent's topology rather than discover the node again
// (its own discovery walks every PCI device: 20 ms of CPU on each node of every launch): where
// the topology holds what PMIx would have found. Without the PCI walk (a node without GPUs)
// it has no I/O devices; that is nothing lost where the network is plain interfaces, but an
// RDMA device's place is what PMIx's fabric plugins and its device distances are for.
bool pmix_may_borrow(const Topology& topology, const NodeHello& hello);

}  // namespace muster
