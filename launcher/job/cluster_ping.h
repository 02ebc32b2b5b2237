// `muster ping`'s pass over a cluster: how each node was reached, every pair of nodes
// probed on every address, clocks, identities and facts compared, and the rendezvous
// address and interfaces chosen from what was measured.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/remote/launch_spec.h"
#include "launcher/remote/remote_job.h"
#include "probes/network_report.h"

namespace muster {

struct PingOptions {
  int round_trips = 50;                         // K: enough for a stable median and a p99
  bool bandwidth = false;                       // also stream bulk data per pair
  std::chrono::milliseconds bulk{300};          // how long each bulk stream lasts
  std::chrono::milliseconds timeout{2000};      // per connection attempt
  std::function<void()> on_round_done;          // after each round of the tournament
};

// How many rounds of pair probes `nodes` reachable nodes take.
int probe_rounds(int nodes);

struct NodeStatus {
  std::string host, address;
  NodeReach reach;
  std::optional<double> clock_offset_ms;        // node clock minus head clock
  std::optional<NodeHello> facts;
};

// Something found, in plain words; failures fail the check (exit 1), warnings do not.
struct Problem {
  enum class Severity { Fail, Warn };
  Severity severity = Severity::Fail;
  std::string check;                            // "reach", "pair", "rtt", "bandwidth", ...
  std::string message;
};

struct PingReport {
  std::vector<NodeStatus> nodes;                // by node rank
  std::vector<PairProbe> pairs;                 // node ranks, one entry per address probed
  NetworkChoice choice;                         // node ranks
  std::vector<Problem> problems;
  bool bandwidth_measured = false;
  bool failed() const;
};

// Runs the whole pass over the nodes `job` reached (BestEffort), comparing with `checks`.
PingReport ping_cluster(RemoteJob& job, const ClusterSpec& cluster, const PingOptions& options);

}  // namespace muster
