// One job over an open cluster session: each node is sent its part of the plan, and the
// head supervises the ranks until every node has reported how its part ended. Job policy
// (what stops everything, what a timeout or a lost node means) lives here; the session
// only carries frames to and from the agents.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/cluster/rank_plan.h"
#include "launcher/job/control_socket.h"
#include "launcher/job/restarts.h"
#include "launcher/local/local_job.h"
#include "launcher/remote/session.h"

namespace muster {

// What outlives one attempt of a job restarted after a failure: the socket where `muster
// stacks` reaches the job (opened by the first attempt, so that a request between attempts
// waits for the next one instead of finding no job), and whether --stall, once per job, has
// read the stacks.
struct SessionJobState {
  std::unique_ptr<JobControlSocket> control;
  bool control_tried = false;
  bool stall_read = false;
};

// Starts the plan's ranks on their nodes and supervises them until all ended: the first
// failure anywhere stops every node, as do a byte on `interrupt_fds` (a second one: SIGKILL
// at once), the policy's timeout and a node that falls silent. `job_state`: the job's, for
// every attempt of a job (unset: this run is the whole job). Throws Error(Runtime) before
// starting anything when a node that holds ranks is not usable.
JobResult run_over_session(ClusterSession& session, const RankPlan& plan, const LaunchRequest& request,
                           const TeardownPolicy& policy, JobOutput& output,
                           const std::vector<int>& interrupt_fds, AttemptFacts* facts = nullptr,
                           SessionJobState* job_state = nullptr);

}  // namespace muster
