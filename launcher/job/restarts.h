// A job that survives a node: the attempts of one job, and whose fault each end was. A node
// that was lost, failed to start its ranks, or fails a quick check of health and reach after
// a failure is left out for the rest of the job and its share moves to a spare; a rank that
// failed on a node that checks healthy is started again in place, so that a bug in the
// user's code does not use up the spares. How an attempt runs is the runner's: the loop here
// only decides, and a recording fake drives it in the unit tests.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/local/local_job.h"

namespace muster {

using SteadyTime = std::chrono::steady_clock::time_point;

// What an attempt learnt beyond its result, for a restart: whose fault, and when.
struct AttemptFacts {
  // Nodes the attempt itself found at fault, with why: lost, or their agent failed to start
  // the ranks. (Which nodes the ranks failed on is a rank failure, not a node's fault.)
  std::map<size_t, std::string> faulty;
  std::optional<SteadyTime> ranks_running;  // every node of the attempt had started its ranks
  std::optional<SteadyTime> failure_seen;   // the first failure, which began the teardown
};

// How one attempt ended, as the runner saw it.
struct AttemptEnd {
  JobResult result;
  std::string ended_by;  // in words: "rank 3 (node2) exited with status 3", "lost contact with node3: ..."
  AttemptFacts facts;
};

// Runs one attempt at a time, and checks nodes between them.
class AttemptRunner {
 public:
  virtual ~AttemptRunner() = default;
  // Starts attempt `number` (0 is the first) with the k-th share of the job on `nodes[k]`,
  // and supervises it until it ended or `deadline` (the whole job's --timeout, unset: none)
  // passed.
  virtual AttemptEnd run_attempt(int number, const std::vector<size_t>& nodes,
                                 std::optional<SteadyTime> deadline) = 0;
  // After a failure: which of `nodes` fail a quick check of their health and reach, with why.
  virtual std::map<size_t, std::string> check_nodes(const std::vector<size_t>& nodes) = 0;
  // `node` is left out for the rest of the job, for `why`: the moment to tell the scheduler
  // (run --drain-bad drains it under Slurm). Returns what was done, in one line, or "".
  virtual std::string leave_out(size_t node, const std::string& why) = 0;
  virtual std::string host(size_t node) const = 0;
};

// One attempt, for the timeline; the n-th of a job's is attempt n (restart count n-1).
struct AttemptRecord {
  std::vector<std::string> hosts;  // the k-th share's node
  double started_s = 0;            // since the first attempt started
  JobEnd end = JobEnd::Completed;
  std::string ended_by;            // "rank 3 (node2) exited with status 3", "lost contact with node3: ..."
  std::string action;              // "restarted in place", "node3 left out (...); its ranks moved to node5", "none: ..."
  std::optional<double> seconds_to_running;  // from the failure to the next attempt's ranks running
};

struct RestartedJob {
  JobResult result;                        // the last attempt's: its exit status is the job's
  std::vector<AttemptRecord> attempts;
  std::map<size_t, std::string> left_out;  // by node: why
  std::vector<std::string> told;           // what leave_out did, one line each
};

// Runs attempts on `nodes` until one needs no restart (it completed, timed out, was
// interrupted or hit a time limit), `restarts` restarts are spent, `deadline` has passed, or
// a node left out has no spare left among `spares` (taken in order); then the last attempt's
// result is the job's, with a note when a node had no spare. Every attempt gets the same
// `deadline`: --timeout bounds the whole job, not each attempt.
RestartedJob run_with_restarts(AttemptRunner& runner, std::vector<size_t> nodes, std::vector<size_t> spares,
                               int restarts, std::optional<SteadyTime> deadline = std::nullopt);

// Whether an attempt that ended so is started again, when restarts are left: a failure is;
// a job that completed, timed out or was interrupted is not.
bool end_calls_for_restart(JobEnd end);

// The cluster's spares: its last `count` nodes (--spares K) besides those its file marks
// 'spare: true'. Throws Error(Usage) when --spares leaves no node to run on or the cluster is
// this machine alone, Error(Config) when the file's spares leave none.
void set_spares(ClusterSpec& cluster, int count);

// --nodes N, as srun -N inside a larger allocation: the first N nodes of the cluster run the
// job and the rest are its spares. Returns how many spares that is, for set_spares. Throws
// Error(Usage) when N is below 1 or more than the cluster's nodes, naming both.
int spares_beyond(const ClusterSpec& cluster, int nodes);

// The nodes that run the job (not spares) and the spares, each in cluster order.
std::pair<std::vector<size_t>, std::vector<size_t>> working_and_spare_nodes(const ClusterSpec& cluster);

}  // namespace muster
