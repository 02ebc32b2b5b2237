// Why Slurm signalled the job muster runs in. slurmstepd sends SIGTERM to every process of a
// step at its job's time limit, at scancel and at preemption alike; only slurmctld knows which
// it was, so the head asks it (scontrol, behind a seam) and names the cause, instead of
// reporting a time limit as an interrupt or as muster's own --timeout.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "launcher/cluster/environment.h"
#include "launcher/local/local_job.h"

namespace muster {

// A job as one line of `scontrol show job ID -o` tells it.
struct SlurmJobState {
  std::string id;
  std::string state;       // "RUNNING", "COMPLETING", "TIMEOUT", "CANCELLED"
  std::string reason;      // "None", "TimeLimit", "Prolog"
  std::string time_limit;  // "00:01:00", "UNLIMITED"
  bool past_time_limit() const { return state == "TIMEOUT" || reason == "TimeLimit"; }
};

// Parses one line of `scontrol show job ID -o`. Throws Error(Runtime) when it names no
// JobState.
SlurmJobState parse_scontrol_job(const std::string& line);

class SlurmJobQuery {
 public:
  virtual ~SlurmJobQuery() = default;
  // Throws Error(Runtime) naming the job and what scontrol said when it cannot tell.
  virtual SlurmJobState state_of(const std::string& job_id) = 0;
};

// scontrol from the PATH, cut at `deadline`: slurmstepd's KillWait (30 s by default, 3 s on
// the test cluster) is all the time a signalled head has to say why.
std::unique_ptr<SlurmJobQuery> scontrol_job_query(std::chrono::milliseconds deadline);

// When `result` ended by a SIGTERM while inside the allocation of `env` (SLURM_JOB_ID), to
// the head or first to a rank (not by muster's teardown), asks `query` why: at the job's time
// limit the job becomes JobEnd::TimeLimit (exit 124); for any other cause, or when scontrol
// cannot tell, it stays as it ended, and for the head's SIGTERM a note says what Slurm said.
void explain_slurm_signal(JobResult& result, const Environment& env, SlurmJobQuery& query);

}  // namespace muster
