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
#include "launcher/remote/agent_protocol.h"
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

// The signal number when one of `fds` has a byte (a stop request), else 0.
int pending_interrupt(const std::vector<int>& fds);

// "nothing heard from it for 10.2 s (last at 14:03:07)"
std::string silence_text(double seconds);

// An answer to one request, and when the request went out and the answer came back (for
// clock offsets).
struct AskAnswer {
  std::optional<std::string> payload;  // unset: no answer (the node was lost, or too slow)
  std::chrono::system_clock::time_point sent, answered;
};

// One request of a stream of asks: for node `node`, answered within `limit` of being sent.
// `tag` is the asker's own name for it.
struct AskRequest {
  size_t node = 0;
  std::string payload;
  std::chrono::milliseconds limit{0};
  size_t tag = 0;
};

// What keeps a stream of asks going: what to send now (called after every answer, and at
// least every 50 ms), what came of each request (no payload: the node was lost or the limit
// passed first), and whether anything more will come.
struct AskFlow {
  std::function<std::vector<AskRequest>()> next;
  std::function<void(size_t tag, AskAnswer answer)> answered;
  std::function<bool()> finished;
};

struct LinkDriver;  // one of the few threads that drive the links (session.cpp)

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
  // Keeps asks in flight as `flow` says, until it is finished and every request ended.
  // A request to an unusable node ends at once, unanswered. Throws Interrupted on a byte
  // from `interrupt_fds`.
  void ask_stream(const AskFlow& flow, const std::vector<int>& interrupt_fds);

  // --- for a job over the session (launcher/job/session_job.h supervises it) --------------

  // A fresh id for a request or a run: never reused within the session.
  int new_id() { return ++next_id_; }
  // Queues `frame` for node `node`'s agent.
  void send(size_t node, const Frame& frame);
  // Queues one copy of `frame` for every node of `nodes` (a completed fence): the bytes are
  // encoded and held once, however many nodes they go to.
  void send_to_each(const std::vector<size_t>& nodes, const Frame& frame);
  // What one node's link said: a frame (heartbeats left out), or, with none, that the link
  // ended and why.
  struct NodeEvent {
    size_t node = 0;
    std::optional<Frame> frame;
    std::string why_ended;
    std::chrono::system_clock::time_point at;  // when it was read
  };
  // What the links said since the last call, waiting up to `wait` for something.
  std::vector<NodeEvent> take_events(std::chrono::milliseconds wait);
  const std::string& host(size_t node) const;
  // Node `node` can no longer be used for `why`; its link is closed.
  void lose(size_t node, const std::string& why);
  // Nodes that have been silent for longer than the heartbeat timeout, with how long.
  std::vector<std::pair<size_t, double>> silent_nodes() const;
  // What the scheduler that started the agents says ended them, waiting up to `wait`.
  AgentLauncher::OutsideEnd outside_end(std::chrono::milliseconds wait);

  struct Link;    // one node's connection and agent
  struct Events;  // what the links' drivers tell the head's thread

 private:
  ClusterSession();
  void start_drivers();

  std::chrono::milliseconds heartbeat_timeout_;
  std::shared_ptr<AgentLauncher> launcher_;  // kept for as long as its agents run
  std::vector<std::unique_ptr<Link>> links_;
  std::unique_ptr<Events> events_;
  std::vector<std::unique_ptr<LinkDriver>> drivers_;  // the threads that drive the links
  std::vector<NodeHello> hellos_;
  std::vector<NodeReach> reach_;
  std::vector<std::string> lost_;  // by node: "" while usable
  int next_id_ = 0;                // of asks and runs: never reused within a session
};

}  // namespace muster
