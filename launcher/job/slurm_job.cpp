#include "launcher/job/slurm_job.h"

#include <csignal>

#include <fmt/format.h>

#include "launcher/cluster/slurm_allocation.h"
#include "launcher/error.h"
#include "launcher/local/command_within.h"

namespace muster {
namespace {

// The value of `key` ("JobState") in scontrol's one-line form: the word after " key=".
std::string scontrol_field(const std::string& line, const std::string& key) {
  size_t at = line.rfind(key + "=", 0) == 0 ? 0 : line.find(" " + key + "=");
  if (at == std::string::npos) return "";
  if (at > 0 || line[0] == ' ') ++at;
  at += key.size() + 1;
  return line.substr(at, line.find_first_of(" \n", at) - at);
}

class ScontrolJobQuery : public SlurmJobQuery {
 public:
  explicit ScontrolJobQuery(std::chrono::milliseconds deadline) : deadline_(deadline) {}
  SlurmJobState state_of(const std::string& job_id) override {
    return parse_scontrol_job(
        run_checked_within({"scontrol", "show", "job", job_id, "-o"}, deadline_, "job " + job_id).out);
  }

 private:
  std::chrono::milliseconds deadline_;
};

}  // namespace

SlurmJobState parse_scontrol_job(const std::string& line) {
  SlurmJobState out;
  out.id = scontrol_field(line, "JobId");
  out.state = scontrol_field(line, "JobState");
  out.reason = scontrol_field(line, "Reason");
  out.time_limit = scontrol_field(line, "TimeLimit");
  if (out.state.empty())
    throw Error(ErrorKind::Runtime, "scontrol named no JobState for the job: " + line.substr(0, 200));
  return out;
}

std::unique_ptr<SlurmJobQuery> scontrol_job_query(std::chrono::milliseconds deadline) {
  return std::make_unique<ScontrolJobQuery>(deadline);
}

namespace {

// slurmstepd signals the ranks of a step it ends as well as the head: a rank's SIGTERM that
// muster's teardown did not send may be the first word muster has of it.
bool rank_terminated_from_outside(const JobResult& result) {
  if (result.end != JobEnd::RankFailed) return false;
  for (const auto& r : result.ranks)
    if (result.first_failed_rank && r.rank == *result.first_failed_rank)
      return r.status && r.status->kind == ExitStatus::Kind::Signaled && r.status->signal == SIGTERM &&
             !r.stopped_by_teardown;
  return false;
}

}  // namespace

void explain_slurm_signal(JobResult& result, const Environment& env, SlurmJobQuery& query) {
  const bool head_terminated = result.end == JobEnd::Interrupted && result.received_signal == SIGTERM;
  if (!(head_terminated || rank_terminated_from_outside(result)) || !inside_slurm_allocation(env)) return;
  const std::string job_id = env.get("SLURM_JOB_ID");
  try {
    const SlurmJobState job = query.state_of(job_id);
    if (job.past_time_limit()) {
      result.end = JobEnd::TimeLimit;
      result.notes.push_back(fmt::format("Slurm time limit: job {} reached its time limit ({}) and "
                                         "slurmstepd sent SIGTERM",
                                         job_id, job.time_limit));
    } else if (head_terminated) {
      result.notes.push_back(fmt::format("the SIGTERM came while Slurm's job {} is {} (reason: {})",
                                         job_id, job.state, job.reason));
    }
  } catch (const Error& e) {
    if (!head_terminated) return;  // a rank's own SIGTERM needs no word from Slurm
    result.notes.push_back(fmt::format("received SIGTERM inside Slurm's job {}, and Slurm could not "
                                       "say why: {}",
                                       job_id, e.what()));
  }
}

}  // namespace muster
