// Starting a job's ranks, here or across the nodes of a session: what `run`, `smoke` and
// `doctor` share. The plan, the environment, the rendezvous and the interfaces are chosen
// here, from what the nodes reported and the network pass measured.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/cluster/rank_plan.h"
#include "launcher/job/cluster_context.h"
#include "launcher/job/restarts.h"
#include "launcher/local/local_job.h"
#include "launcher/local/mpi_world.h"
#include "topology/binding.h"

namespace muster {

// Everything about how a job is started, as the flags give it.
struct JobOptions {
  std::vector<std::string> command;   // argv[0] may be kMusterSelf
  std::vector<std::string> exports;   // -x
  std::optional<int> ranks;           // -n; unset: every slot
  MapBy map_by = MapBy::Slot;
  BindPolicy bind = BindPolicy::Core;
  double grace_s = 3;
  // A rank ending with this code gave up on a peer: the others get settle_s to end on their
  // own before they are stopped (see TeardownPolicy).
  std::optional<int> gave_up_exit_code;
  double settle_s = 0;
  double timeout_s = 0;               // 0: none
  double stall_s = 0;                 // --stall: 0, never
  MpiServe mpi = MpiServe::Auto;
  // Where every rank starts (--chdir; relative to the caller's directory), and where a node
  // that cannot enter it fails. Unset: the cluster file's launch.chdir, else the caller's
  // directory, with $HOME on the nodes that lack it (as mpirun's remote ranks).
  std::optional<std::string> chdir;
  // How many times the job is started again after a failure (--restarts, launch.restarts);
  // see launcher/job/restarts.h for whose fault a failure is and what is done about it.
  int restarts = 0;
  // --drain-bad: a node left out is drained in Slurm with why (through node_drain.h, as
  // health --drain), unless an administrator drained it first. Slurm's launcher only.
  bool drain_bad = false;
};

struct LaunchedJob {
  RankPlan plan;     // the last attempt's
  JobResult result;  // the last attempt's: its exit status is the job's
  std::vector<AttemptRecord> attempts;  // for the timeline: one, unless the job was started again
  std::vector<std::pair<std::string, std::string>> left_out;  // host, why
};

using OutputFactory = std::function<std::unique_ptr<JobOutput>(const RankPlan&)>;

// Throws Error(Config) naming them when the cluster's entries are all this machine and more
// than one (localhost and 127.0.0.1): run would start its ranks as that many nodes of one
// machine. (smoke uses exactly that to test several nodes on one machine, and says so.)
void refuse_this_machine_listed_twice(const ClusterContext& context);

// Plans and starts the ranks (locally when every node is this machine, else over the
// context's session, opened now if need be) and supervises them until all ended. Nodes the
// session could not reach or has lost get no ranks. Throws Error before anything starts
// when the input is wrong, a node cannot be reached, a machine is listed twice or no
// rendezvous address works; Interrupted on Ctrl-C before the start.
LaunchedJob launch_job(ClusterContext& context, const JobOptions& options,
                       const OutputFactory& make_output);

// How a job, or one attempt of it, ended, in a few words: "rank 3 (node2) exited with status
// 3", "interrupted by SIGINT", "the job ran past --timeout 60s". `lost`: the nodes it lost,
// with why, named for a lost node's end ("lost contact with node3: ...").
std::string describe_job_end(const JobResult& result, const RankPlan& plan, double timeout_s,
                             const std::map<size_t, std::string>& lost = {});

// The end's name in JSON: "completed", "rank_failed", "node_lost", ...
const char* job_end_name(JobEnd end);

// The plan launch_job would make: with each node's GPU count as the session's agents
// reported it (or this machine's topology), and no ranks on nodes that cannot be used.
RankPlan plan_job(ClusterContext& context, std::optional<int> ranks, MapBy map_by);

}  // namespace muster
