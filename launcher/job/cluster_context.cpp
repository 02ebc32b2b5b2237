#include "launcher/job/cluster_context.h"

#include "launcher/cluster/hostfile.h"
#include "launcher/remote/slurm_launcher.h"

namespace muster {
namespace {

// With one address per node there is no interface to choose: the launch needs only the
// rendezvous node reached from every node and every node from it, 2(n-1) probes. With more,
// only the whole mesh shows which subnet joins every pair (n(n-1) probes). Either way a
// broken pair is found by ping and doctor, which always probe the mesh.
bool one_network_each(ClusterSession& session) {
  for (size_t i = 0; i < session.hellos().size(); ++i)
    if (session.usable(i) && session.hellos()[i].addresses.size() > 1) return false;
  return true;
}

}  // namespace

ClusterContext::ClusterContext(ClusterSpec cluster, RemoteSettings remote,
                               std::shared_ptr<SshTransport> transport)
    : interrupt_fds_{signals_.fd()}, cluster_(std::move(cluster)), remote_(remote),
      is_local_(only_this_machine(cluster_)), transport_(std::move(transport)) {
  refuse_fanout_under_slurm(cluster_, remote_);
}

void refuse_fanout_under_slurm(const ClusterSpec& cluster, const RemoteSettings& remote) {
  // srun starts every node's step itself: there are no SSH handshakes to pace, and a flag
  // that silently does nothing misleads whoever tunes it.
  if (cluster.launcher == Launcher::Slurm && remote.fanout_given)
    throw Error(ErrorKind::Usage,
                "--fanout paces SSH handshakes, and under Slurm srun starts every node itself: it would do "
                "nothing; drop --fanout (or set launcher: ssh in the cluster file to reach the nodes over SSH)");
}

ClusterSession& ClusterContext::session(Reach reach, std::function<void()> on_node_done) {
  if (session_) return *session_;
  std::shared_ptr<AgentLauncher> launcher;
  if (cluster_.launcher == Launcher::Slurm) {
    launcher = make_slurm_agent_launcher(cluster_);
  } else {
    if (!transport_) transport_ = make_libssh_transport();
    launcher = make_ssh_agent_launcher(transport_, cluster_);
  }
  SessionOptions options;
  options.fanout = remote_.fanout;
  options.shipping = remote_.shipping;
  options.reach = reach;
  options.heartbeat_timeout = remote_.heartbeat_timeout;
  options.on_node_done = std::move(on_node_done);
  session_ = ClusterSession::open(launcher, cluster_, options, interrupt_fds_);
  return *session_;
}

const PingReport& ClusterContext::network() {
  if (!network_) {
    PingOptions quick;
    quick.pairs = one_network_each(session()) ? PairSchedule::WithRendezvous : PairSchedule::Every;
    quick.clocks = false;
    quick.round_trips = 5;
    network_ = ping_cluster(session(), cluster_, quick, interrupt_fds_);
  }
  return *network_;
}

}  // namespace muster
