// The local job supervisor against a recording fake spawner: what it signals, in which
// order, and how the job's exit status is decided.
#include "launcher/local/local_job.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/fakes/fake_spawner.h"

namespace muster {
namespace {

using testing::FakeProgram;
using testing::FakeSpawner;

struct RecordedOutput : JobOutput {
  std::vector<std::string> lines;
  void line(int rank, OutputStream stream, std::string_view text) override {
    lines.push_back(fmt::format("{}{} {}", stream == OutputStream::Stdout ? "out" : "err", rank, text));
  }
  void flush() override {}
};

std::vector<RankProcess> ranks_running(const std::vector<std::string>& programs) {
  std::vector<RankProcess> out;
  for (size_t i = 0; i < programs.size(); ++i) {
    RankProcess p;
    p.rank = int(i);
    p.spec.argv = {programs[i]};
    out.push_back(p);
  }
  return out;
}

TeardownPolicy quick_policy() {
  TeardownPolicy p;
  p.grace = Milliseconds(30);
  p.kill_wait = Milliseconds(30);
  return p;
}

TEST(LocalJob, AllRanksSucceedingIsStatusZeroWithNoSignals) {
  FakeSpawner spawner;
  spawner.programs["ok"] = {"hello\npartial", 0};
  RecordedOutput output;
  JobResult result = run_local_job(spawner, ranks_running({"ok", "ok"}), quick_policy(), output,
                                   {}, {"MUSTER_JOB_ID=job"});
  EXPECT_EQ(result.end, JobEnd::Completed);
  EXPECT_EQ(result.exit_code(), 0);
  EXPECT_EQ(spawner.log, (std::vector<std::string>{"spawn ok 100", "spawn ok 101"}));
  std::sort(output.lines.begin(), output.lines.end());
  EXPECT_EQ(output.lines, (std::vector<std::string>{"out0 hello", "out0 partial", "out1 hello",
                                                    "out1 partial"}));
}

TEST(LocalJob, FirstFailureTearsDownTheOthersWithTermThenKill) {
  FakeSpawner spawner;
  spawner.programs["fails"] = {"", 3};
  spawner.programs["polite"] = {};                       // dies on SIGTERM
  spawner.programs["stubborn"] = {"", std::nullopt, true};  // needs SIGKILL
  RecordedOutput output;
  JobResult result = run_local_job(spawner, ranks_running({"polite", "fails", "stubborn"}),
                                   quick_policy(), output, {}, {"MUSTER_JOB_ID=job"});
  EXPECT_EQ(result.end, JobEnd::RankFailed);
  EXPECT_EQ(result.first_failed_rank, 1);
  EXPECT_EQ(result.exit_code(), 3);
  // SIGTERM to both survivors at once, then SIGKILL only once the grace period is over.
  ASSERT_GE(spawner.log.size(), 6u);
  EXPECT_EQ(spawner.log[3], "SIGTERM 100");
  EXPECT_EQ(spawner.log[4], "SIGTERM 102");
  EXPECT_EQ(std::count(spawner.log.begin(), spawner.log.end(), "SIGKILL 102"), 1);
  EXPECT_EQ(std::count(spawner.log.begin(), spawner.log.end(), "SIGKILL 101"), 1);  // its group
  EXPECT_TRUE(result.ranks[0].stopped_by_teardown);
  EXPECT_FALSE(result.ranks[1].stopped_by_teardown);
  EXPECT_EQ(result.ranks[2].status->signal, SIGKILL);
  EXPECT_TRUE(result.stuck.empty());
}

// A rank that gave up waiting for a peer does not stop the others at once: they get the
// settle time to end on their own, and only one still running then is stopped.
TEST(LocalJob, ARankThatGaveUpLetsTheOthersSettleBeforeTeardown) {
  FakeSpawner spawner;
  spawner.programs["gave-up"] = {"", 4};
  spawner.programs["hung"] = {};  // never ends by itself; dies on SIGTERM
  RecordedOutput output;
  TeardownPolicy policy = quick_policy();
  policy.gave_up_exit_code = 4;
  policy.settle = Milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  JobResult result = run_local_job(spawner, ranks_running({"gave-up", "hung"}), policy, output, {},
                                   {"MUSTER_JOB_ID=job"});
  EXPECT_GE(std::chrono::steady_clock::now() - start, policy.settle);
  EXPECT_EQ(result.end, JobEnd::RankFailed);
  EXPECT_EQ(result.first_failed_rank, 0);
  EXPECT_EQ(result.exit_code(), 4);
  EXPECT_EQ(std::count(spawner.log.begin(), spawner.log.end(), "SIGTERM 101"), 1);
  EXPECT_FALSE(result.ranks[0].stopped_by_teardown);
  EXPECT_TRUE(result.ranks[1].stopped_by_teardown);
}

// Any other failure, even during the settle time, stops the job at once as before.
TEST(LocalJob, AnyOtherFailureBesideARankThatGaveUpTearsDownAtOnce) {
  FakeSpawner spawner;
  spawner.programs["gave-up"] = {"", 4};
  spawner.programs["fails"] = {"", 3};
  spawner.programs["hung"] = {};
  RecordedOutput output;
  TeardownPolicy policy = quick_policy();
  policy.gave_up_exit_code = 4;
  policy.settle = Milliseconds(60'000);
  JobResult result = run_local_job(spawner, ranks_running({"gave-up", "fails", "hung"}), policy,
                                   output, {}, {"MUSTER_JOB_ID=job"});
  EXPECT_EQ(result.end, JobEnd::RankFailed);
  EXPECT_TRUE(result.ranks[2].stopped_by_teardown);
  EXPECT_EQ(std::count(spawner.log.begin(), spawner.log.end(), "SIGTERM 102"), 1);
}

// Both exits arrive in one reap: the peer that exited with an error (as a rank does when
// its neighbour's connection drops) is listed first, yet the killed rank is the cause, and
// neither was "stopped by teardown": both were dead before it began.
TEST(LocalJob, ExitsReapedTogetherBlameTheKilledRankAndNeitherIsCalledStopped) {
  FakeSpawner spawner;
  spawner.programs["reacts"] = {"", 1};
  spawner.programs["killed"] = {};
  spawner.programs["killed"].killed_by = SIGKILL;
  spawner.programs["polite"] = {};
  RecordedOutput output;
  JobResult result = run_local_job(spawner, ranks_running({"reacts", "killed", "polite"}),
                                   quick_policy(), output, {}, {"MUSTER_JOB_ID=job"});
  EXPECT_EQ(result.end, JobEnd::RankFailed);
  EXPECT_EQ(result.first_failed_rank, 1);
  EXPECT_EQ(result.exit_code(), 128 + SIGKILL);
  EXPECT_FALSE(result.ranks[0].stopped_by_teardown);
  EXPECT_FALSE(result.ranks[1].stopped_by_teardown);
  EXPECT_TRUE(result.ranks[2].stopped_by_teardown);
}

TEST(LocalJob, AProcessThatSurvivesSigkillIsNamedAndTheWaitEnds) {
  FakeSpawner spawner;
  spawner.programs["fails"] = {"", 1};
  spawner.programs["unkillable"] = {"", std::nullopt, true, true};
  RecordedOutput output;
  JobResult result = run_local_job(spawner, ranks_running({"fails", "unkillable"}),
                                   quick_policy(), output, {}, {"MUSTER_JOB_ID=job"});
  EXPECT_EQ(result.exit_code(), 1);
  ASSERT_EQ(result.stuck.size(), 1u);
  EXPECT_EQ(result.stuck[0].rank, 1);
  EXPECT_EQ(result.stuck[0].description, "pid 101 (fake)");
  EXPECT_FALSE(result.ranks[1].status.has_value());
}

TEST(LocalJob, AStartFailureStartsNothingMoreAndStopsWhatStarted) {
  FakeSpawner spawner;
  spawner.programs["ok"] = {};
  spawner.programs["missing"] = {"", std::nullopt, false, false, true};
  RecordedOutput output;
  JobResult result = run_local_job(spawner, ranks_running({"ok", "missing", "ok"}),
                                   quick_policy(), output, {}, {"MUSTER_JOB_ID=job"});
  EXPECT_EQ(result.end, JobEnd::StartFailed);
  EXPECT_EQ(result.exit_code(), 127);
  EXPECT_EQ(result.first_failed_rank, 1);
  EXPECT_NE(result.start_error.find("cannot execute 'missing'"), std::string::npos);
  EXPECT_EQ(spawner.log, (std::vector<std::string>{"spawn ok 100", "SIGTERM 100"}));
}

TEST(LocalJob, AnExceptionFromTheOutputKillsEveryRankBeforeItEscapes) {
  FakeSpawner spawner;
  spawner.programs["chatty"] = {"hello\n"};  // prints, then runs until stopped
  spawner.programs["quiet"] = {};
  struct FullDisk : JobOutput {
    void line(int, OutputStream, std::string_view) override { throw std::runtime_error("disk full"); }
    void flush() override {}
  } output;
  EXPECT_THROW(run_local_job(spawner, ranks_running({"quiet", "chatty"}), quick_policy(), output,
                             {}, {"MUSTER_JOB_ID=job"}),
               std::runtime_error);
  EXPECT_EQ(spawner.log, (std::vector<std::string>{"spawn quiet 100", "spawn chatty 101",
                                                   "SIGKILL 100", "SIGKILL 101"}));
}

TEST(LocalJob, ASignalToMusterStopsTheJobWithItsStatus) {
  FakeSpawner spawner;
  spawner.programs["runs"] = {};
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_NONBLOCK), 0);
  unsigned char sigint = SIGINT;
  ASSERT_EQ(write(fds[1], &sigint, 1), 1);
  RecordedOutput output;
  JobResult result = run_local_job(spawner, ranks_running({"runs", "runs"}), quick_policy(),
                                   output, {fds[0]}, {"MUSTER_JOB_ID=job"});
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(result.end, JobEnd::Interrupted);
  EXPECT_EQ(result.exit_code(), 130);
  EXPECT_EQ(spawner.log[2], "SIGTERM 100");
  EXPECT_EQ(spawner.log[3], "SIGTERM 101");
}

// Ctrl-C while a failure stops the job: the end and status stay the failure's, the signal is
// kept (no restart follows it), and a second Ctrl-C sends SIGKILL without waiting out the grace.
TEST(LocalJob, CtrlCWhileAFailureStopsTheJobIsKeptAndASecondKillsAtOnce) {
  FakeSpawner spawner;
  spawner.programs["fails"] = {"", 3};
  spawner.programs["stubborn"] = {"", std::nullopt, true};  // needs SIGKILL
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_NONBLOCK), 0);
  TeardownPolicy policy = quick_policy();
  policy.grace = std::chrono::hours(1);  // only the second Ctrl-C ends this job
  std::thread user([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the failure's teardown has begun
    const unsigned char twice[2] = {SIGINT, SIGINT};
    EXPECT_EQ(write(fds[1], twice, 2), 2);
  });
  RecordedOutput output;
  JobResult result = run_local_job(spawner, ranks_running({"fails", "stubborn"}), policy, output, {fds[0]},
                                   {"MUSTER_JOB_ID=job"});
  user.join();
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(result.end, JobEnd::RankFailed);
  EXPECT_EQ(result.exit_code(), 3);
  EXPECT_EQ(result.received_signal, SIGINT);
  EXPECT_EQ(std::count(spawner.log.begin(), spawner.log.end(), "SIGKILL 101"), 1);
}

TEST(LocalJob, TheTimeoutStopsTheJob) {
  FakeSpawner spawner;
  spawner.programs["runs"] = {};
  TeardownPolicy policy = quick_policy();
  policy.timeout = Milliseconds(20);
  RecordedOutput output;
  JobResult result = run_local_job(spawner, ranks_running({"runs"}), policy, output, {}, {"MUSTER_JOB_ID=job"});
  EXPECT_EQ(result.end, JobEnd::TimedOut);
  EXPECT_EQ(result.exit_code(), 124);
  EXPECT_TRUE(result.ranks[0].stopped_by_teardown);
}

TEST(LocalJob, ExitStatusOfASignalledRankIs128PlusTheSignal) {
  JobResult result;
  result.end = JobEnd::RankFailed;
  result.first_failed_rank = 2;
  result.ranks = {{0, 10, ExitStatus::exited(0)}, {2, 12, ExitStatus::signaled(SIGSEGV)}};
  EXPECT_EQ(result.exit_code(), 128 + SIGSEGV);
  EXPECT_EQ(ExitStatus::signaled(SIGSEGV).describe(), "was killed by SIGSEGV (signal 11)");
}

// A service that asks the job to abort on its first serve, as a rank's MPI_Abort does, and
// records what the job asked of it.
struct AbortingService : RankService {
  int abort_code = 7;
  std::vector<std::string> log;
  void prepare(int rank, ProcessSpec& spec) override {
    log.push_back(fmt::format("prepare {}", rank));
    spec.env.set("SERVED", "1");
  }
  void spawned(int rank) override { log.push_back(fmt::format("spawned {}", rank)); }
  std::vector<int> descriptors() const override { return {}; }
  std::vector<Event> serve() override {
    if (said_) return {};
    said_ = true;
    return {{1, "rank 1 called MPI_Abort with code " + std::to_string(abort_code), abort_code}};
  }
  std::string waiting_on() const override { return ""; }
  bool said_ = false;
};

// An MPI_Abort ends the job at once with the rank's code, as mpirun's; a code of 0 is still
// no success. Each rank is prepared before its spawn and let go after it.
TEST(LocalJob, ARankThatAbortsThroughTheServiceEndsTheJobWithItsCode) {
  for (int code : {7, 256 + 9, 0}) {
    FakeSpawner spawner;
    spawner.programs["waits"] = {};  // runs until signalled, as MPICH's rank waits after PMI abort
    AbortingService service;
    service.abort_code = code;
    RecordedOutput output;
    JobResult result = run_local_job(spawner, ranks_running({"waits", "waits"}), quick_policy(), output, {},
                                     {"MUSTER_JOB_ID=job"}, &service);
    EXPECT_EQ(result.end, JobEnd::RankFailed) << code;
    ASSERT_TRUE(result.aborted) << code;
    EXPECT_EQ(result.aborted->rank, 1);
    EXPECT_EQ(result.first_failed_rank, 1);
    EXPECT_EQ(result.exit_code(), code == 7 ? 7 : code == 265 ? 9 : 1) << code;
    EXPECT_EQ(service.log, (std::vector<std::string>{"prepare 0", "spawned 0", "prepare 1", "spawned 1"}));
  }
}

}  // namespace
}  // namespace muster
