// Running a job's ranks on other machines: an agent per node over SSH, the same local
// launcher on every node, one teardown for all of them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "launcher/cluster_spec.h"
#include "launcher/fanout.h"
#include "launcher/launch_spec.h"
#include "launcher/local_job.h"
#include "launcher/muster_shipping.h"
#include "launcher/ssh_transport.h"

namespace muster {

struct RemoteOptions {
  int fanout = kDefaultFanout;  // at most this many SSH handshakes at once
  Shipping shipping = Shipping::Allowed;
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

  // What each node's agent reported, by node rank.
  const std::vector<NodeHello>& hellos() const { return hellos_; }

  // Starts the plan's ranks on their nodes and supervises them until all ended: the first
  // failure anywhere stops every node, as do `interrupt_fds` and the policy's timeout.
  JobResult run(const RankPlan& plan, const LaunchRequest& request, const TeardownPolicy& policy,
                JobOutput& output, const std::vector<int>& interrupt_fds);

  struct Link;  // one node's connection and agent

 private:
  RemoteJob() = default;
  std::vector<std::unique_ptr<Link>> links_;
  std::vector<NodeHello> hellos_;
};

}  // namespace muster
