// How a cluster session starts the agent on each node: over SSH, one connection per node
// (with the bundle shipped when missing), or through Slurm, every agent in one srun step
// calling back to the head. Either way the session gets, per node, a channel to an agent
// that has said hello; everything after that is the same.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/remote/agent_start.h"
#include "launcher/remote/ssh_transport.h"

namespace muster {

// One node's agent, started and past its hello.
struct NodeAgent {
  std::unique_ptr<SshConnection> connection;  // SSH only: what the agent's channel runs over
  StartedAgent agent;
  ConnectTimings timings;
};

// What every launcher is told about the start.
struct AgentStartOptions {
  std::string agent_args;  // after "muster"
  Shipping shipping = Shipping::Allowed;
  std::chrono::milliseconds hello_timeout{30000};
};

class AgentLauncher {
 public:
  virtual ~AgentLauncher() = default;
  // Starts the agent of node `node` of the cluster and returns it once it has said hello.
  // Throws SshError naming the node's host, in the node's own words where there are any.
  // Called on several threads at once; `cancelled` becoming true calls the attempt off.
  virtual NodeAgent start(size_t node, const AgentStartOptions& options,
                          const std::atomic<bool>& cancelled) = 0;
  // How many nodes to start at once: SSH handshakes are bounded by sshd's MaxStartups.
  virtual int window(int fanout) const { return fanout; }
  // What ended the agents from outside (a scheduler's cancel, time limit or failed node),
  // waiting up to `wait` for it to say so; an empty note when nothing did.
  struct OutsideEnd {
    std::string note;         // in the scheduler's own words, for the job's report
    bool time_limit = false;  // the job ran out of time: it timed out
  };
  virtual OutsideEnd outside_end(std::chrono::milliseconds wait) { (void)wait; return {}; }
};

// Over SSH through `transport`, one connection per node of `cluster`.
std::shared_ptr<AgentLauncher> make_ssh_agent_launcher(std::shared_ptr<SshTransport> transport,
                                                       const ClusterSpec& cluster);

}  // namespace muster
