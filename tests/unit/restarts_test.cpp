// Whose fault an attempt's end was and what is done about it, with a recording runner.
#include "launcher/job/restarts.h"

#include <csignal>
#include <deque>
#include <functional>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "launcher/cluster/cluster_file.h"
#include "launcher/error.h"
#include "launcher/job/launch.h"

namespace muster {
namespace {

// Plays the attempts it is given, in order, and records which nodes each ran on and which
// nodes were checked.
class RecordingRunner : public AttemptRunner {
 public:
  std::deque<AttemptEnd> ends;
  std::map<size_t, std::string> unhealthy;     // what check_nodes finds, of the nodes asked
  std::vector<std::vector<size_t>> ran_on;     // per attempt
  std::vector<int> numbers;
  std::vector<std::vector<size_t>> checked;
  std::vector<std::optional<SteadyTime>> deadlines;  // per attempt

  std::optional<int> throws_at;                // run_attempt(number) calls start_throws, as a start can throw
  std::function<void()> start_throws;
  std::function<void()> during_check;          // what happens while check_nodes waits (Ctrl-C, time)

  AttemptEnd run_attempt(int number, const std::vector<size_t>& nodes, std::optional<SteadyTime> deadline) override {
    if (throws_at == number) start_throws();
    numbers.push_back(number);
    deadlines.push_back(deadline);
    ran_on.push_back(nodes);
    AttemptEnd end = ends.front();
    ends.pop_front();
    return end;
  }
  std::map<size_t, std::string> check_nodes(const std::vector<size_t>& nodes) override {
    checked.push_back(nodes);
    if (during_check) during_check();
    std::map<size_t, std::string> out;
    for (size_t n : nodes)
      if (unhealthy.count(n)) out[n] = unhealthy.at(n);
    return out;
  }
  std::vector<std::pair<size_t, std::string>> left_out;  // in the order the runner was told
  std::string leave_out(size_t node, const std::string& why) override {
    left_out.emplace_back(node, why);
    return fmt::format("drained node{}", node + 1);
  }
  std::string host(size_t node) const override { return fmt::format("node{}", node + 1); }
};

// A host list of four nodes, n0 to n3, one slot each.
ClusterSpec four_hosts() {
  ClusterSpec cluster;
  for (int i = 0; i < 4; ++i) cluster.nodes.push_back(NodeSpec{fmt::format("n{}", i), "", {1}, {}, {}, {}});
  return cluster;
}

AttemptEnd completed() { return {}; }
AttemptEnd rank_failed(int code) {
  AttemptEnd end;
  end.result.end = JobEnd::RankFailed;
  end.result.first_failed_rank = 0;
  RankOutcome o;
  o.status = ExitStatus::exited(code);
  end.result.ranks.push_back(o);
  end.ended_by = fmt::format("rank 0 exited with status {}", code);
  return end;
}
AttemptEnd node_lost(size_t node) {
  AttemptEnd end;
  end.result.end = JobEnd::NodeLost;
  end.result.first_failed_rank = 0;
  end.facts.faulty[node] = "nothing heard from it for 5 s";
  end.ended_by = "lost a node";
  return end;
}

TEST(Restarts, ALostNodeIsLeftOutAndItsShareMovesToASpare) {
  RecordingRunner runner;
  runner.ends = {node_lost(2), completed()};
  RestartedJob job = run_with_restarts(runner, {0, 1, 2, 3}, {4}, 3);
  ASSERT_EQ(runner.ran_on.size(), 2u);
  EXPECT_EQ(runner.ran_on[1], (std::vector<size_t>{0, 1, 4, 3}));  // the share keeps its place
  EXPECT_EQ(runner.numbers, (std::vector<int>{0, 1}));
  EXPECT_EQ(job.result.exit_code(), 0);
  ASSERT_EQ(job.left_out.size(), 1u);
  EXPECT_EQ(job.left_out.at(2), "nothing heard from it for 5 s");
  ASSERT_EQ(job.attempts.size(), 2u);
  EXPECT_EQ(job.attempts[0].action, "node3 left out; its ranks moved to node5");
  EXPECT_EQ(job.attempts[1].end, JobEnd::Completed);
  // The lost node is not asked again; the others are, then the spare it needs.
  ASSERT_EQ(runner.checked.size(), 2u);
  EXPECT_EQ(runner.checked[0], (std::vector<size_t>{0, 1, 3}));
  EXPECT_EQ(runner.checked[1], (std::vector<size_t>{4}));
}

TEST(Restarts, ARankThatFailsOnAHealthyNodeIsRestartedInPlace) {
  RecordingRunner runner;
  runner.ends = {rank_failed(3), completed()};
  RestartedJob job = run_with_restarts(runner, {0, 1}, {2}, 1);
  ASSERT_EQ(runner.ran_on.size(), 2u);
  EXPECT_EQ(runner.ran_on[1], (std::vector<size_t>{0, 1}));
  EXPECT_TRUE(job.left_out.empty());
  EXPECT_EQ(job.attempts[0].action, "restarted in place: no node at fault");
  EXPECT_EQ(job.result.exit_code(), 0);
  // A restart in place needs no spare: the spare is not asked, and cannot be lost to a check.
  ASSERT_EQ(runner.checked.size(), 1u);
  EXPECT_EQ(runner.checked[0], (std::vector<size_t>{0, 1}));
}

TEST(Restarts, ANodeThatFailsItsCheckAfterARankFailureIsLeftOut) {
  RecordingRunner runner;
  runner.ends = {rank_failed(1), completed()};
  runner.unhealthy[1] = "GPU0: Xid 79";
  RestartedJob job = run_with_restarts(runner, {0, 1}, {2}, 1);
  ASSERT_EQ(runner.ran_on.size(), 2u);
  EXPECT_EQ(runner.ran_on[1], (std::vector<size_t>{0, 2}));
  EXPECT_EQ(job.left_out.at(1), "GPU0: Xid 79");
}

TEST(Restarts, WithoutASpareTheJobEndsNamingTheNode) {
  RecordingRunner runner;
  runner.ends = {node_lost(1)};
  RestartedJob job = run_with_restarts(runner, {0, 1, 2}, {}, 5);
  EXPECT_EQ(runner.ran_on.size(), 1u);
  EXPECT_EQ(job.result.end, JobEnd::NodeLost);
  EXPECT_EQ(job.result.exit_code(), 255);
  ASSERT_FALSE(job.result.notes.empty());
  EXPECT_EQ(job.result.notes.back(),
            "node2 was left out (nothing heard from it for 5 s) and no spare node was left; the job ends");
  EXPECT_EQ(job.attempts.back().action, "none: node2 left out, no spare was left");
}

TEST(Restarts, ASpareThatFailsItsCheckIsNotUsed) {
  RecordingRunner runner;
  runner.ends = {node_lost(0), completed()};
  runner.unhealthy[2] = "unreachable";
  RestartedJob job = run_with_restarts(runner, {0, 1}, {2, 3}, 1);
  ASSERT_EQ(runner.ran_on.size(), 2u);
  EXPECT_EQ(runner.ran_on[1], (std::vector<size_t>{3, 1}));
  EXPECT_EQ(job.left_out.at(2), "unreachable");
  EXPECT_EQ(runner.checked, (std::vector<std::vector<size_t>>{{1}, {2}, {3}}));
}

// The runner hears of each node left out when it is, lost node and failed spare alike, so
// that --drain-bad tells Slurm then and not at the job's end; what it did is in the job's words.
TEST(Restarts, TheRunnerIsToldOfEachNodeLeftOutAsItIsLeftOut) {
  RecordingRunner runner;
  runner.ends = {node_lost(0), rank_failed(1), completed()};
  runner.unhealthy[2] = "unreachable";
  RestartedJob job = run_with_restarts(runner, {0, 1}, {2, 3}, 2);
  EXPECT_EQ(runner.ran_on.size(), 3u);
  EXPECT_EQ(runner.left_out, (std::vector<std::pair<size_t, std::string>>{
                                 {2, "unreachable"}, {0, "nothing heard from it for 5 s"}}));
  EXPECT_EQ(job.told, (std::vector<std::string>{"drained node3", "drained node1"}));
}

TEST(Restarts, NodesAsSrunMinusNHoldTheRestBackAsSpares) {
  ClusterSpec cluster = four_hosts();
  EXPECT_EQ(spares_beyond(cluster, 3), 1);
  EXPECT_EQ(spares_beyond(cluster, 4), 0);
  try {
    spares_beyond(cluster, 5);
    ADD_FAILURE() << "5 of 4 nodes";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_STREQ(e.what(), "--nodes 5: the cluster has 4 nodes; give 1 to 4");
  }
  EXPECT_THROW(spares_beyond(cluster, 0), Error);
}

// A restart in place asks no spare (a spare that missed that check was lost for good); when a
// node is at fault, spares are asked in order until one passes.
TEST(Restarts, SparesAreCheckedOnlyWhenANodeNeedsOne) {
  RecordingRunner runner;
  runner.ends = {rank_failed(1), node_lost(1), completed()};
  runner.unhealthy[2] = "unreachable";
  RestartedJob job = run_with_restarts(runner, {0, 1}, {2, 3}, 2);
  ASSERT_EQ(runner.ran_on.size(), 3u);
  EXPECT_EQ(runner.ran_on[1], (std::vector<size_t>{0, 1}));
  EXPECT_EQ(runner.ran_on[2], (std::vector<size_t>{0, 3}));
  EXPECT_EQ(runner.checked, (std::vector<std::vector<size_t>>{{0, 1}, {0}, {2}, {3}}));
}

TEST(Restarts, WhenTheRestartsAreSpentTheJobExitsAsItWouldHaveWithoutThem) {
  RecordingRunner runner;
  runner.ends = {rank_failed(3), rank_failed(3), rank_failed(3)};
  RestartedJob job = run_with_restarts(runner, {0, 1}, {}, 2);
  EXPECT_EQ(runner.ran_on.size(), 3u);
  for (const auto& nodes : runner.ran_on) EXPECT_EQ(nodes, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(job.result.exit_code(), 3);
  ASSERT_EQ(job.attempts.size(), 3u);
  EXPECT_EQ(job.attempts[2].action, "none: the 2 restarts were spent");
}

TEST(Restarts, ATimeoutOrCtrlCIsNotRestarted) {
  for (JobEnd end : {JobEnd::TimedOut, JobEnd::Interrupted, JobEnd::TimeLimit}) {
    RecordingRunner runner;
    AttemptEnd stopped;
    stopped.result.end = end;
    runner.ends = {stopped};
    RestartedJob job = run_with_restarts(runner, {0}, {1}, 3);
    EXPECT_EQ(runner.ran_on.size(), 1u);
    EXPECT_TRUE(runner.checked.empty());
  }
}

// --timeout bounds the whole job: a restarted attempt gets what is left of it, not a fresh
// clock, and no attempt starts once it has passed.
TEST(Restarts, EveryAttemptSharesTheJobsOneDeadline) {
  RecordingRunner runner;
  runner.ends = {rank_failed(1), node_lost(0), completed()};
  const SteadyTime deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
  run_with_restarts(runner, {0}, {1}, 5, deadline);
  ASSERT_EQ(runner.deadlines.size(), 3u);
  for (const auto& d : runner.deadlines) EXPECT_EQ(d, deadline);

  RecordingRunner late;
  late.ends = {rank_failed(1), completed()};
  RestartedJob job = run_with_restarts(late, {0}, {1}, 5, std::chrono::steady_clock::now());
  EXPECT_EQ(late.ran_on.size(), 1u) << "an attempt was started after the job's deadline";
  EXPECT_EQ(job.result.exit_code(), 1);
  EXPECT_EQ(job.attempts.back().action, "none: the job's --timeout has passed");
}

TEST(Restarts, TheTimelineHasTheTimeToRanksRunningAgain) {
  RecordingRunner runner;
  AttemptEnd lost = node_lost(0);
  const auto t = std::chrono::steady_clock::now();
  lost.facts.failure_seen = t;
  AttemptEnd done = completed();
  done.facts.ranks_running = t + std::chrono::milliseconds(1500);
  runner.ends = {lost, done};
  RestartedJob job = run_with_restarts(runner, {0}, {1}, 1);
  ASSERT_TRUE(job.attempts[0].seconds_to_running);
  EXPECT_DOUBLE_EQ(*job.attempts[0].seconds_to_running, 1.5);
}

// The report's end and the timeline's say the same, from one function: a timeout or Ctrl-C
// included, which the local timeline left empty.
TEST(Restarts, AnEndIsDescribedTheSameForTheReportAndTheTimeline) {
  ClusterSpec two;
  two.nodes = {NodeSpec{"a", "", {2}, {}, {}, {}}, NodeSpec{"b", "", {2}, {}, {}, {}}};
  const RankPlan plan = make_rank_plan(two, std::nullopt, MapBy::Slot);
  JobResult result;
  result.end = JobEnd::Interrupted;
  result.received_signal = SIGTERM;
  EXPECT_EQ(describe_job_end(result, plan, 0), "interrupted by SIGTERM");
  result.end = JobEnd::TimedOut;
  EXPECT_EQ(describe_job_end(result, plan, 2.5), "the job ran past --timeout 2.5s");
  result.end = JobEnd::NodeLost;
  result.first_failed_rank = 2;
  EXPECT_EQ(describe_job_end(result, plan, 0), "rank 2 (b) was on a node that was lost");
  EXPECT_EQ(describe_job_end(result, plan, 0, {{1, "nothing heard from it for 5 s"}}),
            "lost contact with b: nothing heard from it for 5 s");
  EXPECT_STREQ(job_end_name(JobEnd::NodeLost), "node_lost");
}

// Ctrl-C while a failed attempt stops is the user saying stop: the end stays the failure's,
// and its status the job's, but nothing starts again. The node it lost is still named.
TEST(Restarts, CtrlCWhileAFailureStopsTheJobIsNotRestarted) {
  RecordingRunner runner;
  AttemptEnd lost = node_lost(1);
  lost.result.received_signal = SIGINT;
  runner.ends = {lost, completed()};
  RestartedJob job = run_with_restarts(runner, {0, 1}, {2}, 3);
  EXPECT_EQ(runner.ran_on.size(), 1u);
  EXPECT_TRUE(runner.checked.empty());
  EXPECT_EQ(job.result.exit_code(), 255);
  EXPECT_EQ(job.attempts.back().action, "none: interrupted by SIGINT as it stopped");
  EXPECT_EQ(job.left_out.at(1), "nothing heard from it for 5 s");
}

// An attempt that cannot start (a spare that did not say which ports are free) ends the job
// with the attempt before it: its status, its timeline, and why there was no other.
TEST(Restarts, AnErrorAsALaterAttemptStartsEndsTheJobWithTheAttemptBefore) {
  RecordingRunner runner;
  runner.ends = {rank_failed(3)};
  runner.throws_at = 1;
  runner.start_throws = [] {
    throw Error(ErrorKind::Runtime, "n1 did not say which ports are free for the rendezvous: no answer");
  };
  RestartedJob job = run_with_restarts(runner, {0, 1}, {}, 2);
  EXPECT_EQ(job.result.exit_code(), 3);
  ASSERT_EQ(job.attempts.size(), 1u);
  EXPECT_EQ(job.attempts[0].action,
            "restarted in place: no node at fault; none: n1 did not say which ports are free for the rendezvous: no "
            "answer (in attempt 2)");
  ASSERT_FALSE(job.result.notes.empty());
  EXPECT_EQ(job.result.notes.back(),
            "no restart: n1 did not say which ports are free for the rendezvous: no answer (in attempt 2)");

  RecordingRunner stopped;  // Ctrl-C as it started: the same, in the words of a signal
  stopped.ends = {rank_failed(3)};
  stopped.throws_at = 1;
  stopped.start_throws = [] { throw Interrupted(SIGINT); };
  job = run_with_restarts(stopped, {0, 1}, {}, 2);
  EXPECT_EQ(job.result.exit_code(), 3);
  EXPECT_EQ(job.attempts.back().action, "restarted in place: no node at fault; none: interrupted by SIGINT in attempt 2");
}

TEST(Restarts, CtrlCWhileTheNodesAreCheckedEndsTheJobNamingTheLostNode) {
  RecordingRunner runner;
  runner.ends = {node_lost(0), completed()};
  runner.during_check = [] { throw Interrupted(SIGINT, "while asking the nodes"); };
  RestartedJob job = run_with_restarts(runner, {0, 1}, {2}, 2);
  EXPECT_EQ(runner.ran_on.size(), 1u);
  EXPECT_EQ(job.result.exit_code(), 255);
  EXPECT_EQ(job.attempts.back().action, "none: interrupted by SIGINT while the nodes were checked");
  EXPECT_EQ(runner.left_out, (std::vector<std::pair<size_t, std::string>>{{0, "nothing heard from it for 5 s"}}));
}

// The checks between attempts take seconds: an attempt is not started once they have taken
// the job past its --timeout.
TEST(Restarts, NoAttemptStartsWhenTheChecksTookTheJobPastItsDeadline) {
  RecordingRunner runner;
  runner.ends = {node_lost(0), completed()};
  const SteadyTime deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  runner.during_check = [deadline] { std::this_thread::sleep_until(deadline + std::chrono::milliseconds(5)); };
  RestartedJob job = run_with_restarts(runner, {0, 1}, {2}, 2, deadline);
  EXPECT_EQ(runner.ran_on.size(), 1u) << "an attempt started after the job's deadline";
  EXPECT_EQ(job.result.exit_code(), 255);
  EXPECT_EQ(job.attempts.back().action,
            "node1 left out; its ranks moved to node3; not started: the job's --timeout passed while the nodes were "
            "checked");
}

// --drain-bad drains every node the job lost, the last attempt's too, and a second node lost
// when the first took the last spare.
TEST(Restarts, TheLastAttemptsLostNodesAreLeftOutToo) {
  RecordingRunner runner;
  runner.ends = {node_lost(0), node_lost(2)};
  RestartedJob job = run_with_restarts(runner, {0, 1}, {2, 3}, 1);
  EXPECT_EQ(runner.ran_on.size(), 2u);
  EXPECT_EQ(job.attempts.back().action, "none: the 1 restart was spent");
  EXPECT_EQ(runner.left_out, (std::vector<std::pair<size_t, std::string>>{{0, "nothing heard from it for 5 s"},
                                                                         {2, "nothing heard from it for 5 s"}}));

  RecordingRunner two_lost;
  AttemptEnd both = node_lost(0);
  both.facts.faulty[1] = "nothing heard from it for 5 s";
  two_lost.ends = {both};
  job = run_with_restarts(two_lost, {0, 1}, {}, 1);
  EXPECT_EQ(job.left_out.size(), 2u);
  EXPECT_EQ(two_lost.left_out.size(), 2u);

  RecordingRunner plain;  // without restarts nothing is left out: there is no job to leave it out of
  plain.ends = {node_lost(0)};
  job = run_with_restarts(plain, {0, 1}, {}, 0);
  EXPECT_TRUE(plain.left_out.empty());
}

TEST(Restarts, SparesAreTheLastNodesOfAHostList) {
  ClusterSpec cluster = four_hosts();
  set_spares(cluster, 1);
  auto [working, spares] = working_and_spare_nodes(cluster);
  EXPECT_EQ(working, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(spares, (std::vector<size_t>{3}));
  EXPECT_THROW(set_spares(cluster, 4), Error);
  EXPECT_THROW(set_spares(cluster, -1), Error);
}

TEST(Restarts, TheClusterFileNamesSparesAndRestarts) {
  ClusterSpec c = parse_cluster_yaml("launch:\n  restarts: 3\nnodes:\n  - host: n[1-2]\n  - host: n3\n    spare: true\n",
                                     "c.yaml");
  EXPECT_EQ(c.launch.restarts, 3);
  ASSERT_EQ(c.nodes.size(), 3u);
  EXPECT_FALSE(c.nodes[1].spare);
  EXPECT_TRUE(c.nodes[2].spare);
  EXPECT_THROW(parse_cluster_yaml("launch:\n  restarts: -1\nnodes: [n1]\n", "c.yaml"), Error);
  EXPECT_THROW(parse_cluster_yaml("nodes:\n  - host: n1\n    spare: maybe\n", "c.yaml"), Error);
  ClusterSpec all_spare = parse_cluster_yaml("nodes:\n  - host: n1\n    spare: true\n", "c.yaml");
  EXPECT_THROW(set_spares(all_spare, 0), Error);
}

}  // namespace
}  // namespace muster
