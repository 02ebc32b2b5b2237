// A cluster session: every node opened once (one SSH connection and one agent each), then
// any number of steps over it: requests (facts, clocks, the network probe) and jobs (a
// launch, a smoke test), until the session ends. Head and agents exchange heartbeats both
// ways for as long as it lasts, so a node that goes silent is noticed within seconds.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/local/local_job.h"
#include "launcher/remote/agent.h"
#include "launcher/remote/fanout.h"
#include "launcher/remote/launch_spec.h"
#include "launcher/remote/agent_launcher.h"
#include "launcher/remote/agent_start.h"
#include "launcher/remote/ssh_transport.h"

namespace muster {

// Whether one unreachable node stops everything (a launch) or only itself (a check).
enum class Reach { AllOrNothing, BestEffort };

struct SessionOptions {
  int fanout = kDefaultFanout;  // at most this many SSH handshakes at once
  Shipping shipping = Shipping::Allowed;
  Reach reach = Reach::AllOrNothing;
  // Silence from a node (or, on the node, from the head) for this long means it is lost.
  std::chrono::milliseconds heartbeat_timeout = kDefaultHeartbeatTimeout;
  // How long an agent may take from its start to its hello (it discovers the node first).
  std::chrono::milliseconds hello_timeout{30000};
  std::function<void()> on_node_done;  // called (from any thread) as each node is reached or not
};

// How reaching one node went.
struct NodeReach {
  bool ok = false;
  std::string failure;          // "HOST: cause: detail" when not ok
  ConnectTimings timings;       // the steps that completed
  double command_rtt_ms = 0;    // a remote command's round trip (SSH only): the agent's start command answering
};

// The SSH target for a node of the cluster.
SshTarget ssh_target_of(const NodeSpec& node);

// An answer to one request, and when the request went out and the answer came back (for
// clock offsets).
struct AskAnswer {
  std::optional<std::string> payload;  // unset: no answer (the node was lost, or too slow)
  std::chrono::system_clock::time_point sent, answered;
};

class ClusterSession {
 public:
  // Connects to every node (at most `fanout` handshakes at once), makes sure muster is
  // there, starts each agent and reads its hello. With Reach::AllOrNothing, throws
  // Error(Runtime) listing every node that failed, with its cause; nothing was started.
  // Throws Interrupted when a byte (a signal number) arrives on one of `interrupt_fds`
  // first: muster then ends at once, leaving the connections to close with it.
  static std::unique_ptr<ClusterSession> open(std::shared_ptr<SshTransport> transport,
                                              const ClusterSpec& cluster,
                                              const SessionOptions& options,
                                              const std::vector<int>& interrupt_fds);
  // The same, with the agents started by `launcher` (SSH's or Slurm's).
  static std::unique_ptr<ClusterSession> open(std::shared_ptr<AgentLauncher> launcher,
                                              const ClusterSpec& cluster,
                                              const SessionOptions& options,
                                              const std::vector<int>& interrupt_fds);
  // Says goodbye to every agent and closes every connection.
  ~ClusterSession();

  size_t size() const { return reach_.size(); }
  // What each node's agent reported, by node rank (empty for unreachable nodes).
  const std::vector<NodeHello>& hellos() const { return hellos_; }
  // How reaching each node went, by node rank.
  const std::vector<NodeReach>& reach() const { return reach_; }
  // True while node `node` answers: it was reached and has not been lost since.
  bool usable(size_t node) const;
  // Why node `node` cannot be used (its reach failure, or how it was lost); "" when it can.
  const std::string& why_unusable(size_t node) const { return lost_.at(node); }

  // Sends each request (a JSON Ask) to its node, all at once, and waits up to `limit` for
  // the answers. A node that falls silent or goes away gives no answer and is lost.
  // Throws Interrupted on a byte from `interrupt_fds`.
  std::vector<AskAnswer> ask(const std::vector<std::pair<size_t, std::string>>& requests,
                             std::chrono::milliseconds limit, const std::vector<int>& interrupt_fds);

  // Starts the plan's ranks on their nodes and supervises them until all ended: the first
  // failure anywhere stops every node, as do a byte on `interrupt_fds` (a second one: SIGKILL
  // at once), the policy's timeout and a node that falls silent. Throws Error(Runtime)
  // before starting anything when a node that holds ranks is not usable.
  JobResult run(const RankPlan& plan, const LaunchRequest& request, const TeardownPolicy& policy,
                JobOutput& output, const std::vector<int>& interrupt_fds);

  struct Link;    // one node's connection, agent and the thread that drives them
  struct Events;  // what the links' threads tell the head's thread

 private:
  friend class SessionRun;
  ClusterSession();
  // Node `node` can no longer be used for `why`; its link is closed.
  void lose(size_t node, const std::string& why);
  // Nodes that have been silent for longer than the heartbeat timeout, with how long.
  std::vector<std::pair<size_t, double>> silent_nodes() const;

  std::chrono::milliseconds heartbeat_timeout_;
  std::shared_ptr<AgentLauncher> launcher_;  // kept for as long as its agents run
  std::vector<std::unique_ptr<Link>> links_;
  std::unique_ptr<Events> events_;
  std::vector<NodeHello> hellos_;
  std::vector<NodeReach> reach_;
  std::vector<std::string> lost_;  // by node: "" while usable
  int next_id_ = 0;                // of asks and runs: never reused within a session
};

}  // namespace muster
