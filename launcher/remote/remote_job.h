// Running a job's ranks on other machines: an agent per node over SSH, the same local
// launcher on every node, one teardown for all of them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/remote/fanout.h"
#include "launcher/remote/launch_spec.h"
#include "launcher/local/local_job.h"
#include "launcher/remote/muster_shipping.h"
#include "launcher/remote/ssh_transport.h"

namespace muster {

// Whether one unreachable node stops everything (a launch) or only itself (a check).
enum class Reach { AllOrNothing, BestEffort };

struct RemoteOptions {
  int fanout = kDefaultFanout;  // at most this many SSH handshakes at once
  Shipping shipping = Shipping::Allowed;
  Reach reach = Reach::AllOrNothing;
  bool time_command = false;    // also time a trivial remote command's round trip
  std::function<void()> on_node_done;  // called (from any thread) as each node is reached or not
};

// How reaching one node went.
struct NodeReach {
  bool ok = false;
  std::string failure;          // "HOST: cause: detail" when not ok
  ConnectTimings timings;       // the steps that completed
  double command_rtt_ms = 0;    // with RemoteOptions::time_command
};

// The SSH target for a node of the cluster.
SshTarget ssh_target_of(const NodeSpec& node);

// One agent per node, connected and introduced, with nothing started yet.
class RemoteJob {
 public:
  // Connects to every node, makes sure muster is there, starts each agent and reads its
  // hello. Throws Error(Runtime) listing every node that failed, with its cause; then no
  // node has started anything.
  static std::unique_ptr<RemoteJob> open(SshTransport& transport, const ClusterSpec& cluster,
                                         const RemoteOptions& options);
  ~RemoteJob();

  // What each node's agent reported, by node rank (empty for unreachable nodes).
  const std::vector<NodeHello>& hellos() const { return hellos_; }
  // How reaching each node went, by node rank.
  const std::vector<NodeReach>& reach() const { return reach_; }

  // Sends each request (a JSON Ask) to its node, all at once (one per node), and returns
  // each answer, or nullopt for a node that did not answer within `limit`.
  std::vector<std::optional<std::string>> ask(const std::vector<std::pair<size_t, std::string>>& requests,
                                              std::chrono::seconds limit);

  // Starts the plan's ranks on their nodes and supervises them until all ended: the first
  // failure anywhere stops every node, as do `interrupt_fds` and the policy's timeout.
  JobResult run(const RankPlan& plan, const LaunchRequest& request, const TeardownPolicy& policy,
                JobOutput& output, const std::vector<int>& interrupt_fds);

  struct Link;  // one node's connection and agent

 private:
  RemoteJob() = default;
  std::vector<std::unique_ptr<Link>> links_;
  std::vector<NodeHello> hellos_;
  std::vector<NodeReach> reach_;
};

}  // namespace muster
