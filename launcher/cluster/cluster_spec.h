// The cluster a job runs on, as read from a cluster file, a hostfile, -H or -n.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/cluster/diagnostics.h"
#include "topology/health/health.h"

namespace muster {

// What to do with a host key that is not in known_hosts yet.
enum class HostKeyPolicy {
  Strict,     // refuse unknown and changed keys (the default)
  AcceptNew,  // record unknown keys, refuse changed ones
};

// SSH settings; unset fields fall back to ~/.ssh/config and then to ssh's defaults.
struct SshOptions {
  std::optional<std::string> user;
  std::optional<int> port;
  std::optional<std::string> identity;
  std::optional<std::string> known_hosts;
  std::optional<HostKeyPolicy> host_keys;
  std::optional<double> connect_timeout_s;

  // These settings with every unset field taken from `defaults`.
  SshOptions merged_over(const SshOptions& defaults) const;
};

// The most ranks one node may run, and one job may have: far beyond any machine and any
// job muster has met, but bounded, so that no count from an input can overflow.
inline constexpr int kMaxSlotsPerNode = 1024;
inline constexpr int kMaxRanks = 1 << 20;

// The most restarts one job may ask for: far beyond what a month-long job needs, bounded
// so that a typo is an error and not a job that restarts forever.
inline constexpr int kMaxRestarts = 1000;

// Ranks per node: a fixed number, or "auto" (the node's GPU count, 1 without GPUs).
struct SlotCount {
  std::optional<int> fixed;  // unset means auto
  bool is_auto() const { return !fixed.has_value(); }
};

// One machine of the cluster.
struct NodeSpec {
  std::string host;              // the name ranks see and reports use
  std::string address;           // where to connect (defaults to host)
  SlotCount slots;               // from the node entry, else launch.slots
  std::optional<int> gpu_count;  // known only once topology has been discovered
  SshOptions ssh;                // per-node settings merged over the file's ssh:
  SourceLocation where;          // the entry that named this node
  // Held back for the job's restarts: no ranks until a node that runs some is left out
  // (`spare: true`, --spares).
  bool spare = false;
};

// What the cluster is read for: a job's ranks (run, smoke, doctor) or one command a node
// (exec). A machine listed twice means something else to each, and its message says which.
enum class ClusterUse { Ranks, Command };

// What a machine listed twice would do, for the message that refuses it.
inline const char* listed_twice_would(ClusterUse use) {
  return use == ClusterUse::Command ? "run the command twice on one machine; list it once"
                                    : "run duplicate ranks; give it one entry with more slots instead";
}

// How ranks are started.
struct LaunchOptions {
  SlotCount slots;                          // default for nodes that say nothing
  std::map<std::string, std::string> env;   // added to every rank's environment
  // Where ranks start (launch.chdir, or its older name launch.workdir); a relative path is
  // taken from the caller's directory. Unset: the caller's directory, or $HOME where a node
  // lacks it.
  std::optional<std::string> chdir;
  std::optional<std::string> mpi;           // what --mpi says when not given: auto, pmix, pmi1, none
  std::optional<int> restarts;              // what --restarts says when not given
};

// Thresholds that checks compare against; unset means "not checked".
struct CheckThresholds {
  std::optional<int> gpus_per_node;
  std::optional<std::string> gpu_model;
  std::optional<double> max_rtt_ms;
  std::optional<double> max_clock_skew_ms;
  std::optional<double> min_bandwidth_gbps;
  std::optional<double> min_bandwidth_ratio;  // of the cluster median; unset, 0.5
  std::optional<double> min_busbw_gbps;
  // The GPU stress tests in doctor and health (share/doc/health.md): whether they run without
  // --stress, and their bars (StressSettings's defaults when unset).
  std::optional<bool> stress;
  std::optional<double> stress_peer_ratio;      // of the GPU's peers' median; unset, 0.7
  std::optional<double> stress_hardware_ratio;  // of what its link implies; unset, 0.5
};

// How the agents reach their nodes: over SSH, or as one Slurm step (srun) inside an
// allocation.
enum class Launcher { Ssh, Slurm };

// The whole cluster description.
struct ClusterSpec {
  std::string name;
  std::string source;  // the file it came from, or how it was given
  SshOptions ssh;
  LaunchOptions launch;
  CheckThresholds checks;
  HealthExpectations expect;    // the file's `expect:`, for the health checks
  std::vector<NodeSpec> nodes;  // in file order; node rank is the index
  bool is_this_machine = false; // no cluster was given: run on this machine only
  Launcher launcher = Launcher::Ssh;  // the file's `launcher:`; --launcher overrides it
};

}  // namespace muster
