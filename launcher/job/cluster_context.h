// The cluster a command works on and how it is reached, for the steps `run`, `smoke`,
// `ping` and `doctor` share: this machine directly, or a session with one agent per node,
// opened once and used by every step. It also keeps what was learnt on the way (the
// network pass), so that no step measures twice, and owns muster's stop signals from the
// start, so that Ctrl-C is answered at once whatever step is running.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/job/cluster_ping.h"
#include "launcher/local/shutdown_signals.h"
#include "launcher/remote/session.h"

namespace muster {

// How other machines are reached, as the flags give it.
struct RemoteSettings {
  int fanout = kDefaultFanout;
  bool fanout_given = false;  // on the command line: refused under Slurm, where it does nothing
  Shipping shipping = Shipping::Allowed;
  std::chrono::milliseconds heartbeat_timeout = kDefaultHeartbeatTimeout;
};

// --fanout given for a cluster that srun starts: a usage error naming the flag.
void refuse_fanout_under_slurm(const ClusterSpec& cluster, const RemoteSettings& remote);

class ClusterContext {
 public:
  // `transport` reaches other machines; libssh's when not given (tests give a fake).
  ClusterContext(ClusterSpec cluster, RemoteSettings remote,
                 std::shared_ptr<SshTransport> transport = nullptr);

  ClusterSpec& cluster() { return cluster_; }
  const ClusterSpec& cluster() const { return cluster_; }
  const RemoteSettings& remote() const { return remote_; }
  // True when every node is this machine: ranks start here, without SSH.
  bool is_local() const { return is_local_; }
  // Readable when muster received SIGINT, SIGTERM or SIGHUP (a byte per signal).
  const std::vector<int>& interrupt_fds() const { return interrupt_fds_; }

  // The session over every node, opened on first use. With Reach::BestEffort the nodes
  // that cannot be reached are left out (and named in it); else they fail the opening.
  // Throws Interrupted on Ctrl-C.
  ClusterSession& session(Reach reach = Reach::AllOrNothing, std::function<void()> on_node_done = {});
  bool has_session() const { return session_ != nullptr; }

  // The network pass a launch chooses its rendezvous and interfaces from: the one a step
  // already ran (remember_network), else a quick one run now: 5 round trips per address,
  // no clocks, and each node only with the rendezvous node when every node has one address.
  const PingReport& network();
  void remember_network(PingReport report) { network_ = std::move(report); }

 private:
  ShutdownSignals signals_;  // first: from here on Ctrl-C is muster's to handle
  std::vector<int> interrupt_fds_;
  ClusterSpec cluster_;
  RemoteSettings remote_;
  bool is_local_ = false;
  std::shared_ptr<SshTransport> transport_;
  std::unique_ptr<ClusterSession> session_;
  std::optional<PingReport> network_;
};

}  // namespace muster
