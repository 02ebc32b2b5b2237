// Why Slurm signalled the job, against a recording fake of scontrol: a SIGTERM at the job's
// time limit is a time limit (exit 124, in Slurm's words), any other SIGTERM stays an
// interrupt with what Slurm said, and outside an allocation nothing is asked.
#include <csignal>

#include <gtest/gtest.h>

#include "launcher/error.h"
#include "launcher/job/slurm_job.h"

namespace muster {
namespace {

class RecordingScontrol : public SlurmJobQuery {
 public:
  std::string line;             // what scontrol prints; "" makes it fail
  std::vector<std::string> asked;
  SlurmJobState state_of(const std::string& job_id) override {
    asked.push_back(job_id);
    if (line.empty()) throw Error(ErrorKind::Runtime, "job " + job_id + ": scontrol did not answer within 2 s");
    return parse_scontrol_job(line);
  }
};

const Environment kInsideJob7{{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "node[1-2]"}};

JobResult terminated() {
  JobResult r;
  r.end = JobEnd::Interrupted;
  r.received_signal = SIGTERM;
  return r;
}

TEST(SlurmJob, ScontrolsLineIsReadFieldByField) {
  auto job = parse_scontrol_job(
      "JobId=7 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901756 "
      "Nice=0 Account=(null) QOS=(null) JobState=COMPLETING Reason=TimeLimit Dependency=(null) "
      "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:01:04 TimeLimit=00:01:00 "
      "TimeMin=N/A\n");
  EXPECT_EQ(job.id, "7");
  EXPECT_EQ(job.state, "COMPLETING");
  EXPECT_EQ(job.reason, "TimeLimit");
  EXPECT_EQ(job.time_limit, "00:01:00");  // not TimeMin's, not RunTime's
  EXPECT_TRUE(job.past_time_limit());
  EXPECT_THROW(parse_scontrol_job("slurm_load_jobs error: Invalid job id specified"), Error);
}

TEST(SlurmJob, ASigtermAtTheTimeLimitIsATimeLimitInSlurmsWords) {
  RecordingScontrol scontrol;
  scontrol.line = "JobId=7 JobName=wrap JobState=TIMEOUT Reason=TimeLimit TimeLimit=00:01:00\n";
  JobResult r = terminated();
  explain_slurm_signal(r, kInsideJob7, scontrol);
  EXPECT_EQ(scontrol.asked, std::vector<std::string>{"7"});
  EXPECT_EQ(r.end, JobEnd::TimeLimit);
  EXPECT_EQ(r.exit_code(), 124);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("Slurm time limit: job 7 reached its time limit (00:01:00)"), std::string::npos)
      << r.notes[0];
}

TEST(SlurmJob, ASigtermForAnyOtherCauseStaysAnInterruptAndSaysWhatSlurmSaid) {
  RecordingScontrol scontrol;
  scontrol.line = "JobId=7 JobName=wrap JobState=CANCELLED Reason=None TimeLimit=UNLIMITED\n";
  JobResult r = terminated();
  explain_slurm_signal(r, kInsideJob7, scontrol);
  EXPECT_EQ(r.end, JobEnd::Interrupted);
  EXPECT_EQ(r.exit_code(), 128 + SIGTERM);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_NE(r.notes[0].find("job 7 is CANCELLED"), std::string::npos) << r.notes[0];

  // A slurmctld that does not answer leaves it an interrupt, and says so.
  scontrol.line = "";
  JobResult unanswered = terminated();
  explain_slurm_signal(unanswered, kInsideJob7, scontrol);
  EXPECT_EQ(unanswered.end, JobEnd::Interrupted);
  ASSERT_EQ(unanswered.notes.size(), 1u);
  EXPECT_NE(unanswered.notes[0].find("could not say why: job 7: scontrol did not answer"), std::string::npos)
      << unanswered.notes[0];
}

// On one node slurmstepd's SIGTERM may reach a rank before muster: the rank "failed" of it.
TEST(SlurmJob, ARankKilledBySlurmsSigtermAtTheTimeLimitIsATimeLimitToo) {
  RecordingScontrol scontrol;
  scontrol.line = "JobId=7 JobName=wrap JobState=COMPLETING Reason=TimeLimit TimeLimit=00:01:00\n";
  JobResult r;
  r.end = JobEnd::RankFailed;
  r.first_failed_rank = 1;
  r.ranks = {{0, 10, ExitStatus::signaled(SIGTERM), true}, {1, 11, ExitStatus::signaled(SIGTERM), false}};
  explain_slurm_signal(r, kInsideJob7, scontrol);
  EXPECT_EQ(r.end, JobEnd::TimeLimit);
  EXPECT_EQ(r.exit_code(), 124);

  // A rank that failed on its own (or was killed by another signal) is not Slurm's to explain.
  JobResult own;
  own.end = JobEnd::RankFailed;
  own.first_failed_rank = 0;
  own.ranks = {{0, 10, ExitStatus::exited(3), false}};
  JobResult segv = own;
  segv.ranks = {{0, 10, ExitStatus::signaled(SIGSEGV), false}};
  RecordingScontrol untouched;
  untouched.line = scontrol.line;
  explain_slurm_signal(own, kInsideJob7, untouched);
  explain_slurm_signal(segv, kInsideJob7, untouched);
  EXPECT_TRUE(untouched.asked.empty());
  EXPECT_EQ(own.end, JobEnd::RankFailed);
}

TEST(SlurmJob, NothingIsAskedOutsideAnAllocationOrForAnotherEnd) {
  RecordingScontrol scontrol;
  scontrol.line = "JobId=7 JobState=TIMEOUT Reason=TimeLimit TimeLimit=00:01:00\n";
  JobResult outside = terminated();
  explain_slurm_signal(outside, Environment{}, scontrol);
  JobResult ctrl_c = terminated();
  ctrl_c.received_signal = SIGINT;
  explain_slurm_signal(ctrl_c, kInsideJob7, scontrol);
  JobResult failed;
  failed.end = JobEnd::RankFailed;
  explain_slurm_signal(failed, kInsideJob7, scontrol);
  EXPECT_TRUE(scontrol.asked.empty());
  EXPECT_EQ(outside.end, JobEnd::Interrupted);
  EXPECT_EQ(ctrl_c.end, JobEnd::Interrupted);
  EXPECT_TRUE(outside.notes.empty() && ctrl_c.notes.empty() && failed.notes.empty());
}

}  // namespace
}  // namespace muster
