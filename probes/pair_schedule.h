// When each pair of nodes is measured: as soon as both of its ends are free, never in step
// with the whole cluster, and again later when it failed.
//
// Why not rounds: a round that starts every probe at once sends every SYN and every ARP of
// the round in the same millisecond, waits for its slowest pair, and then starts the next
// burst; on a shared bridge at 32 hosts and more the bursts themselves lose packets, and
// one lost exchange was a false "unreachable". Here a finished pair frees its two nodes
// for the next one in the schedule's order, so measurements spread over time, and a pair
// that failed is tried again after its ends have done other work, before any verdict.
#pragma once

#include <chrono>
#include <cstddef>
#include <list>
#include <vector>

#include "probes/network_report.h"

namespace muster {

// One measurement to start now: src probes dst. Attempts count from 1.
struct PairDispatch {
  int src = 0, dst = 0;
  int attempt = 1;
  bool starved_before = false;  // an earlier attempt failed while a node was short of CPU
  bool operator==(const PairDispatch&) const = default;
};

// How a measurement ended.
enum class PairOutcome {
  Reached,  // every address answered: the pair is done
  Failed,   // some address did not answer: the network may be at fault
  Starved,  // some address did not answer while its prober was short of CPU (the target is
            // weighed once the pass is over: excuse_only_what_both_ends_explain)
  Abandoned,  // the prober or the target is gone from the session: no attempt can follow
};

class PairScheduler {
 public:
  struct Limits {
    // How many measurements the rendezvous node may be in at once, as prober or target
    // (WithRendezvous only). One at a time would put n-1 probes end to end on every
    // launch; its probe server and its agent take more, but a burst of n-1 first contacts is
    // what loses packets.
    int hub_pairs = 16;
    int attempts = 2;           // a pair that fails this often is a verdict
    int attempts_starved = 3;   // unless a failure was starved: then one more
    // A retry waits this long: longer than a SYN's or an ARP's first retransmission (1 s),
    // so whatever held the first attempt up (a node busy starting, a full queue) has passed.
    std::chrono::milliseconds retry_after{1000};
  };
  using Clock = std::chrono::steady_clock;

  PairScheduler(int nodes, PairSchedule schedule, Limits limits);
  PairScheduler(int nodes, PairSchedule schedule) : PairScheduler(nodes, schedule, Limits{}) {}

  // Every queued pair whose ends are free at `now` (and whose retry is due), in the
  // schedule's order, marked busy.
  std::vector<PairDispatch> next(Clock::time_point now);
  // Frees the pair's ends; a failure short of its attempts goes to the back of the queue,
  // due `retry_after` from `now`. Returns whether the pair is settled (no further attempt).
  bool done(const PairDispatch& pair, PairOutcome outcome, Clock::time_point now);

  bool finished() const { return queue_.empty() && in_flight_ == 0; }
  size_t pairs() const { return pairs_; }       // distinct ordered pairs scheduled

 private:
  bool is_hub(int node) const;
  bool free(int node) const;  // for one more measurement, as prober or target

  PairSchedule schedule_;
  Limits limits_;
  struct Queued {
    PairDispatch pair;
    Clock::time_point due;  // the epoch for a first attempt
  };
  std::list<Queued> queue_;  // erased from the middle as pairs start
  std::vector<int> probing_, targeted_;   // per node: measurements in flight by role
  size_t in_flight_ = 0, pairs_ = 0;
};

// How long an attempt at a pair waits at each stage (connecting, proving the secret, each
// round trip). Derived, not fixed: 2 s lets the kernel resend a lost SYN once (it resends
// after 1 s, then 3 s); on top come 8 times the slowest round trip measured so far and how
// long this cluster takes to start a command (a loaded node answers late, not never). Each
// later attempt waits twice as long, which lets one more retransmission through.
std::chrono::milliseconds probe_stage_timeout(int attempt, double slowest_rtt_us, double command_rtt_ms);

}  // namespace muster
