// The network pass over a session: how each node was reached, every pair of nodes probed
// on every address, clocks, identities and facts compared, and the rendezvous address and
// interfaces chosen from what was measured. `ping` shows all of it; `run`, `smoke` and
// `doctor` make their choices from it.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/job/finding.h"
#include "launcher/remote/launch_spec.h"
#include "launcher/remote/session.h"
#include "probes/culprit_search.h"
#include "probes/network_report.h"
#include "probes/pair_schedule.h"

namespace muster {

struct PingOptions {
  PairSchedule pairs = PairSchedule::Every;
  bool clocks = true;                           // measure each node's clock offset
  int round_trips = 50;                         // K: enough for a stable median and a p99
  bool bandwidth = false;                       // also stream bulk data per pair
  std::chrono::milliseconds bulk{300};          // how long each bulk stream lasts
  // How long a probe waits at each stage; unset, derived from what was measured (see
  // probe_stage_timeout) and longer on each retry.
  std::optional<std::chrono::milliseconds> timeout;
  // How long a failed pair waits before its retry (PairScheduler::Limits says why a second).
  std::chrono::milliseconds retry_after = PairScheduler::Limits{}.retry_after;
  std::function<void()> on_pair_done;           // after each pair's last attempt
  // How many slow pairs are measured again alone before a slow link is called a failure.
  int remeasure_limit = 32;
};

// How many ordered pairs of `nodes` reachable nodes are probed (PairSchedule::Every).
int probe_pair_count(int nodes);

struct NodeStatus {
  std::string host, address;
  NodeReach reach;
  std::optional<double> clock_offset_ms;        // node clock minus head clock
  double clock_error_ms = 0;                    // the offset is right within this (half the best round trip)
  std::optional<NodeHello> facts;
  bool here = false;                            // this machine: reached without SSH
  // From its answers as a prober: the highest CPU pressure it reported (the last 10 s, a
  // fraction), and the packets its kernel dropped while it probed.
  std::optional<double> cpu_pressure_peak;
  std::uint64_t dropped_packets = 0;
  // (seconds of the pass when the head got the answer, its CPU "some" stall total in us).
  std::vector<std::pair<double, std::uint64_t>> cpu_stall_samples;
};

struct PingReport {
  std::vector<NodeStatus> nodes;                // by node rank
  std::vector<PairProbe> pairs;                 // node ranks, one entry per address probed
  NetworkChoice choice;                         // node ranks
  PairSchedule schedule = PairSchedule::Every;  // which pairs were probed
  int rendezvous_node = 0;                      // where MASTER_ADDR is: the first node reached that failed no check
  std::optional<int> rendezvous_passed_over;    // the first node reached, where it failed a check
  bool rendezvous_on_failed_node = false;       // every node reached failed a check
  std::vector<Finding> problems;
  bool bandwidth_measured = false;
  bool failed() const;
  // The problems that make a launch pointless: a machine listed twice, no MASTER_ADDR.
  std::vector<std::string> blocking_problems() const;
};

// Runs the whole pass over the nodes of `session` that are usable, comparing with the
// cluster's checks (network_verdicts.h). Throws Interrupted on a byte from `interrupt_fds`.
PingReport ping_cluster(ClusterSession& session, const ClusterSpec& cluster,
                        const PingOptions& options, const std::vector<int>& interrupt_fds);

// The pass for a cluster whose every node is this machine (no cluster named): each node
// reached without SSH and described as an agent would describe it; no pairs to probe. Two
// entries for this machine are found to be the same machine, as over SSH.
PingReport ping_here(const ClusterSpec& cluster);

// The pair search over the agents of `report`'s reachable nodes, each pair streaming both
// ways at once for `options.bulk` (see find_culprits): slow nodes and links in a few rounds
// where the whole mesh takes n-1. Node ranks are `report`'s.
CulpritReport search_slow_pairs(ClusterSession& session, const ClusterSpec& cluster, const PingReport& report,
                                const PingOptions& options, const std::vector<int>& interrupt_fds);
}  // namespace muster
