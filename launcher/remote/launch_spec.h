// What the head sends each node's agent, and what the agent says about its node: the
// JSON payloads of the Spec and Hello frames.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/local/local_job.h"
#include "launcher/local/node_launch.h"
#include "launcher/cluster/rank_plan.h"
#include "probes/interfaces.h"
#include "topology/topology.h"

namespace muster {

// Everything a node needs to start its ranks exactly as the local launcher would.
struct NodeLaunchSpec {
  NodeView node;          // the node's share of the plan
  LaunchRequest request;  // its job.node_env holds this node's entry alone
  TeardownPolicy teardown;  // the agent's own grace and kill wait (the head keeps the timeout)
};

// Facts a node's agent reports before anything starts.
struct NodeHello {
  std::string hostname;
  std::string version;
  std::string machine_id;
  std::string boot_id;
  int gpus = 0;
  std::vector<std::string> gpu_models;
  int cpus = 0;
  std::vector<int> free_ports;  // two TCP ports free on the node: rendezvous candidates
  int probe_port = 0;           // where the agent's probe server listens
  std::string probe_secret;     // what its clients must prove they hold (it came over SSH)
  std::vector<LocalAddress> addresses;  // non-loopback IPv4 addresses, with interfaces
  int nics = 0;
  std::uint64_t memory_bytes = 0;
  std::string kernel;           // uname -r
  // Whether the node's own name resolves there: Gloo and NCCL fall back to it when no
  // interface is named. Unset: the resolver did not answer in time.
  std::optional<bool> name_resolves;
  // How many neighbours (ARP entries) its kernel can hold, net.ipv4.neigh.default.gc_thresh3:
  // a rank with more peers than that on one subnet cannot reach them all. Unset: not known.
  std::optional<std::uint64_t> neighbour_limit;
  // Why PMIx cannot be served to the node's ranks ("" when it can): what a job that would
  // serve it says before anything starts.
  std::string pmix_unavailable;
  // The node has an OpenFabrics device (InfiniBand, RoCE): UCX is then not confined to the
  // interface muster measured, or it would lose its RDMA transports.
  bool rdma = false;
  // The node's GPU paths as `nvidia-smi topo -m` words them, for reports to draw (empty
  // without GPUs, or past kMostPathDevices devices).
  PathMatrix paths;
};

// The most devices a hello's path matrix names: far more than any node's GPUs and NICs.
inline constexpr size_t kMostPathDevices = 128;

std::string to_json(const NodeLaunchSpec& spec);
// Throws Error(Runtime) when the text is not a spec of this version.
NodeLaunchSpec node_launch_spec_from_json(const std::string& text);

std::string to_json(const NodeHello& hello);
NodeHello node_hello_from_json(const std::string& text);

// Bound frames, sent before a node starts its ranks: each rank's CPUs, NUMA node and GPU as
// the node will bind it, and whether the ranks start in $HOME because the job's directory
// could not be entered there (WorkdirRule::OrHome).
struct NodeBound {
  std::vector<std::pair<int, RankBindingReport>> ranks;
  bool went_home = false;
};
std::string to_json(const NodeBound& bound);
// Throws Error(Runtime) when the text is not one.
NodeBound node_bound_from_json(const std::string& text);

// Exit frames: how one of the node's ranks ended.
std::string exit_to_json(const ExitStatus& status);
// Throws Error(Runtime) when the text is not one, or names no possible status.
ExitStatus exit_from_json(const std::string& text);

// Done frames: what the node's part of a job came to once every rank there ended.
struct NodeRunReport {
  std::string start_error;          // why the node's ranks could not start, if so
  int escaped_killed = 0;           // processes found by job id outside rank groups
  std::vector<std::string> notes;
  std::vector<StuckProcess> stuck;  // processes that outlived SIGKILL
  std::optional<JobResult::Abort> aborted;  // a rank here called MPI_Abort
};
NodeRunReport node_run_report(const JobResult& result);
std::string to_json(const NodeRunReport& report);
// Throws Error(Runtime) when the text is not one.
NodeRunReport node_run_report_from_json(const std::string& text);

// The protocol version both sides must share; bumped on any change to the frames or JSON.
inline constexpr int kAgentProtocol = 6;

}  // namespace muster
