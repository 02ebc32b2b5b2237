// The collective smoke test: what every rank runs (a size sweep of each collective with an
// exact check of every element), and how the head turns the ranks' reports into a table.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "probes/collective.h"
#include "probes/culprit_search.h"

namespace muster {

struct SmokeSettings {
  std::vector<CollectiveOp> ops = {CollectiveOp::AllReduce, CollectiveOp::AllGather,
                                   CollectiveOp::ReduceScatter, CollectiveOp::Broadcast};
  size_t min_bytes = 8;
  size_t max_bytes = 4 << 20;   // as smoke's --max-bytes
  double step_factor = 4;
  int iters = 20;
  int warmup = 5;
  bool split_node = false;  // also within every node, and across nodes (one rank per node)
  // Also the pair search (probes/culprit_search.h) over one rank of each node: rounds of
  // disjoint node pairs, each an all-reduce at max_bytes, that name a slow node or link.
  bool pairs = false;
  // What each round of pairs may take: its pairs are timed together over a quarter of it (one
  // run at least; `iters` does not bound it), so a link at 30 Mbit/s costs its round's budget,
  // not 25 iterations, and a healthy pair is timed long enough to hold.
  double pair_round_s = 2;
  // The pair search also runs, without `pairs`, when the world's all-reduce at max_bytes has
  // a bus bandwidth (GB/s) below this: the expectation it failed (checks.min_busbw_gbps).
  std::optional<double> pairs_below_busbw_gbps;
};

// What a rank reports as it goes.
struct SmokeEvent {
  // Skip: the rank is in no group of the steps up to `seq` and has passed them.
  enum class Kind { Enter, Result, Error, Skip };
  Kind kind = Kind::Enter;
  int seq = 0;                 // position in the sequence every rank walks
  std::string group;           // "world", "node 2", "across nodes", "pair 0-3"
  CollectiveOp op = CollectiveOp::AllReduce;
  size_t bytes = 0;            // nccl-tests' size: total bytes for all-gather/reduce-scatter
  size_t count = 0;            // elements per rank
  double time_us = 0;          // mean per iteration on this rank
  long wrong = 0;              // elements that differ from the exact expected value
  std::string message;         // for errors
  bool gave_up = false;        // an error because the peers did not finish within the timeout
};

// The group of the pair search's step between nodes a and b ("pair 0-3"), and back.
std::string pair_group(int a, int b);
std::optional<std::pair<int, int>> nodes_of_pair_group(const std::string& group);

// The sizes of a sweep: min, min*factor, ... up to max (max included).
std::vector<size_t> sweep_sizes(size_t min_bytes, size_t max_bytes, double factor);

// nccl-tests' bus bandwidth factor for n ranks.
double bus_factor(CollectiveOp op, int n);

// Elements per rank for a collective of nccl-tests size `bytes` over n ranks (at least 1).
size_t elements_per_rank(CollectiveOp op, size_t bytes, int n);

// Runs the whole sweep on `world`; `node_of_rank[r]` is rank r's node. Every rank calls it
// with the same arguments. Events go to `emit` as they happen; a failure is emitted as an
// Error event and rethrown. With `settings.pairs`, returns what the pair search found (the
// same on every rank), its nodes numbered as in `node_of_rank`.
std::optional<CulpritReport> run_smoke_sweep(Collective& world, const SmokeSettings& settings,
                                             const std::vector<int>& node_of_rank,
                                             const std::function<void(const SmokeEvent&)>& emit);

// One row of the report: a collective at one size in one group, over all its ranks.
struct SmokeRow {
  std::string group;
  CollectiveOp op = CollectiveOp::AllReduce;
  size_t bytes = 0, count = 0;
  int ranks = 0;
  double time_us = 0;          // the mean over ranks of each rank's mean, as nccl-tests reports
  // The slowest rank's. It names no rank to blame: in a ring every rank waits on the slowest
  // link, so the pair search (--pairs) names the node or link instead.
  double max_time_us = 0;
  double algbw_gbps = 0, busbw_gbps = 0;  // GB/s, decimal
  long wrong = 0;              // over all ranks
  std::map<int, double> time_us_by_rank;
};

// Rows from every rank's Result events (keyed by rank), in the order they were run.
std::vector<SmokeRow> summarize_smoke(const std::map<int, std::vector<SmokeEvent>>& results);

// A row built as results arrive: add each rank's Result of the step, then finish it once
// every rank's is in (its time and bandwidths). What summarize_smoke does for every step.
void add_to_row(SmokeRow& row, int rank, const SmokeEvent& result);
void finish_row(SmokeRow& row);

// The ranks that never arrived at step `failing_seq` (the first step that failed): those
// whose last Enter is before it.
std::vector<int> ranks_never_arrived(const std::map<int, int>& last_enter_by_rank, int world_size,
                                     int failing_seq);

// The ranks that entered step `failing_seq` and never left it, with neither a result nor an
// error: hung inside it (a stuck host thread, a kernel that never ends) while the others
// gave up waiting for them.
std::vector<int> ranks_stuck_in(const std::map<int, int>& last_enter_by_rank,
                                const std::map<int, std::vector<SmokeEvent>>& events_by_rank,
                                int failing_seq);

}  // namespace muster
