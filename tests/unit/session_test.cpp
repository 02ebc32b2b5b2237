// The cluster session on a fake transport whose agents are scripted: one connection and one
// agent per node for any number of steps, and what later steps see after a node failed, was
// never heard from, or a step failed.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "launcher/cluster/rank_plan.h"
#include "launcher/job/session_job.h"
#include "launcher/remote/session.h"
#include "tests/fakes/fake_agent_transport.h"

namespace muster {
namespace {

using testing::FakeAgentTransport;
using std::chrono::milliseconds;

struct Discard : JobOutput {
  void line(int, OutputStream, std::string_view) override {}
  void flush() override {}
};

class SessionTest : public ::testing::Test {
 protected:
  // The head listens for `muster stacks` at a socket named by the job's id, in this user's
  // directory: ctest runs tests side by side, each a process of its own.
  static std::string test_job_id() { return fmt::format("test-{}", getpid()); }
  // Nodes n1..nN at addresses a1..aN, two slots each.
  ClusterSpec cluster(int nodes) {
    for (int i = 1; i <= nodes; ++i) transport_->nodes[fmt::format("a{}", i)];
    ClusterSpec c;
    c.source = "test";
    for (int i = 1; i <= nodes; ++i)
      c.nodes.push_back(NodeSpec{fmt::format("n{}", i), fmt::format("a{}", i), {2}, {}, {}, {}});
    return c;
  }
  std::unique_ptr<ClusterSession> open(const ClusterSpec& c, Reach reach = Reach::AllOrNothing) {
    SessionOptions options;
    options.reach = reach;
    options.heartbeat_timeout = milliseconds(800);
    options.hello_timeout = milliseconds(500);
    return ClusterSession::open(transport_, c, options, {});
  }
  JobResult run(ClusterSession& session, const ClusterSpec& c) {
    RankPlan plan = make_rank_plan(c, std::nullopt, MapBy::Slot);
    LaunchRequest request;
    request.argv = {"true"};
    request.job.job_id = test_job_id();
    TeardownPolicy policy;
    policy.grace = milliseconds(100);
    policy.kill_wait = milliseconds(100);
    Discard output;
    return run_over_session(session, plan, request, policy, output, {});
  }
  testing::FakeAgentNode& node(int i) { return transport_->nodes.at(fmt::format("a{}", i)); }

  std::shared_ptr<FakeAgentTransport> transport_ = std::make_shared<FakeAgentTransport>();
};

TEST_F(SessionTest, EveryStepUsesTheOneConnectionAndAgentOfEachNode) {
  ClusterSpec c = cluster(3);
  auto session = open(c);
  auto clocks = session->ask({{0, R"({"op":"clock"})"}, {1, R"({"op":"clock"})"}, {2, R"({"op":"clock"})"}},
                             milliseconds(2000), {});
  for (const auto& a : clocks) EXPECT_TRUE(a.payload.has_value());
  EXPECT_EQ(run(*session, c).end, JobEnd::Completed);
  EXPECT_EQ(run(*session, c).end, JobEnd::Completed);
  EXPECT_EQ(session->ask({{1, R"({"op":"ports"})"}}, milliseconds(2000), {})[0].payload,
            R"({"ports":[29500,29501]})");
  EXPECT_EQ(transport_->connections(), 3);
  EXPECT_EQ(transport_->agents_started(), 3);
}

// How long a remote command takes is timed on the agent's own start command (until its first
// line), so that reaching a node runs one command, not a `true` before it.
// The caller's directory travels in every node's spec; the nodes that lack it start their
// ranks in $HOME and say so, and the head warns once, naming them as one host list.
TEST_F(SessionTest, NodesWithoutTheCallersDirectoryAreNamedInOneWarning) {
  ClusterSpec c = cluster(4);
  node(2).lacks_workdir = true;
  node(3).lacks_workdir = true;
  auto session = open(c);
  RankPlan plan = make_rank_plan(c, std::nullopt, MapBy::Slot);
  LaunchRequest request;
  request.argv = {"pwd"};
  request.job.job_id = test_job_id();
  request.workdir = "/home/u/project";
  request.workdir_rule = WorkdirRule::OrHome;
  struct Warnings : Discard {
    void launch_warning(const std::string& text) override { said.push_back(text); }
    std::vector<std::string> said;
  } output;
  EXPECT_EQ(run_over_session(*session, plan, request, TeardownPolicy{}, output, {}).end, JobEnd::Completed);
  for (int i = 1; i <= 4; ++i)
    EXPECT_EQ(node(i).workdirs, (std::vector<std::optional<std::string>>{"/home/u/project"})) << i;
  EXPECT_EQ(output.said, (std::vector<std::string>{
                             "'/home/u/project' cannot be entered on n[2-3]: the ranks there start in "
                             "$HOME; --chdir DIR names a directory every node has"}));

  // A directory asked for (--chdir) is not left for $HOME: nothing to warn of here.
  request.workdir_rule = WorkdirRule::Required;
  output.said.clear();
  run_over_session(*session, plan, request, TeardownPolicy{}, output, {});
  EXPECT_TRUE(output.said.empty());
}

// A start that failed on every node (a typo in the command) is the command's fault: no node is
// left out for it. Beside a node that started its ranks, the node that could not is at fault.
TEST_F(SessionTest, AStartThatFailedOnEveryNodeIsTheCommandsFaultNotTheNodes) {
  ClusterSpec c = cluster(2);
  const std::string cannot =
      R"({"start_error":"cannot execute 'trian.py': No such file or directory","escaped":0,"stuck":[]})";
  for (int i : {1, 2}) {
    node(i).job_frames = std::vector<Frame>{};
    node(i).done = cannot;
  }
  auto session = open(c);
  RankPlan plan = make_rank_plan(c, std::nullopt, MapBy::Slot);
  LaunchRequest request;
  request.argv = {"trian.py"};
  request.job.job_id = test_job_id();
  Discard output;
  AttemptFacts facts;
  JobResult result = run_over_session(*session, plan, request, TeardownPolicy{}, output, {}, &facts);
  EXPECT_EQ(result.end, JobEnd::StartFailed);
  EXPECT_TRUE(facts.faulty.empty()) << facts.faulty.begin()->second;

  node(1).job_frames.reset();  // n1 starts its ranks; n2 still cannot
  result = run_over_session(*session, plan, request, TeardownPolicy{}, output, {}, &facts);
  EXPECT_EQ(result.end, JobEnd::StartFailed);
  EXPECT_EQ(facts.faulty, (std::map<size_t, std::string>{
                              {1, "its ranks could not start: cannot execute 'trian.py': No such file or directory"}}));
}

TEST_F(SessionTest, TheCommandRoundTripIsTimedOnTheStartCommandItself) {
  ClusterSpec c = cluster(2);
  auto session = open(c);
  for (size_t i = 0; i < 2; ++i) EXPECT_GT(session->reach()[i].command_rtt_ms, 0) << i;
  auto commands = transport_->commands();
  ASSERT_EQ(commands.size(), 2u);
  for (const auto& command : commands) EXPECT_NE(command.find(" agent "), std::string::npos) << command;
}

TEST_F(SessionTest, ANodeThatNeverSaysHelloIsNamedAndLeftOut) {
  ClusterSpec c = cluster(3);
  node(2).never_says_hello = true;
  auto session = open(c, Reach::BestEffort);
  EXPECT_TRUE(session->usable(0));
  EXPECT_FALSE(session->usable(1));
  EXPECT_TRUE(session->usable(2));
  EXPECT_NE(session->reach()[1].failure.find("n2: timeout: the agent did not say hello"),
            std::string::npos) << session->reach()[1].failure;
  auto answers = session->ask({{0, R"({"op":"clock"})"}, {1, R"({"op":"clock"})"}}, milliseconds(2000), {});
  EXPECT_TRUE(answers[0].payload);
  EXPECT_FALSE(answers[1].payload);

  try {
    open(c, Reach::AllOrNothing);
    ADD_FAILURE() << "a node that never answered must fail the opening";
  } catch (const Error& e) {
    ASSERT_EQ(e.messages().size(), 2u);
    EXPECT_NE(e.messages()[0].find("n2: timeout"), std::string::npos);
    EXPECT_EQ(e.messages()[1], "1 of 3 nodes could not be reached; nothing was started");
  }
}

// A login script that hangs (field-tested: pyenv's rehash waiting on a stale lock) looks like
// a node that never answers; the message says where it stuck.
TEST_F(SessionTest, AShellThatNeverRunsTheStartCommandIsToldApartFromASilentAgent) {
  ClusterSpec c = cluster(2);
  node(2).shell_hangs = true;
  auto session = open(c, Reach::BestEffort);
  EXPECT_TRUE(session->usable(0));
  EXPECT_FALSE(session->usable(1));
  EXPECT_NE(session->reach()[1].failure.find("n2: timeout: the node's shell did not run muster's start "
                                             "command within 0.5 s: a login script (~/.bashrc)"),
            std::string::npos) << session->reach()[1].failure;
}

// However much an agent writes to stderr, its link keeps a few KiB of it: the last words,
// which say why it ended.
TEST_F(SessionTest, AnAgentFloodingStderrIsHeldToItsLastWords) {
  ClusterSpec c = cluster(2);
  node(2).dies_at_run = 1;
  node(2).stderr_mib_as_it_dies = 512;
  auto session = open(c);
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  JobResult result = run(*session, c);
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  EXPECT_EQ(result.end, JobEnd::NodeLost);
  ASSERT_FALSE(result.notes.empty());
  EXPECT_NE(result.notes[0].find("lost contact with n2"), std::string::npos) << result.notes[0];
  EXPECT_NE(result.notes[0].find("the last words of a dying agent"), std::string::npos)
      << result.notes[0].substr(0, 400);
  EXPECT_LT(result.notes[0].size(), 1000u);
  // Peak memory (KiB) grew by far less than the 512 MiB the agent wrote.
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 128 << 10);
}

TEST_F(SessionTest, StepsAfterANodeDiedNameItAndTheOthersGoOn) {
  ClusterSpec c = cluster(3);
  node(2).dies_at_run = 1;
  auto session = open(c);
  JobResult first = run(*session, c);
  EXPECT_EQ(first.end, JobEnd::NodeLost);
  EXPECT_EQ(first.exit_code(), 255);
  ASSERT_FALSE(first.notes.empty());
  EXPECT_NE(first.notes[0].find("lost contact with n2"), std::string::npos) << first.notes[0];
  EXPECT_FALSE(session->usable(1));

  // A request to it gets no answer; a job that needs it starts nowhere.
  EXPECT_FALSE(session->ask({{1, R"({"op":"clock"})"}}, milliseconds(500), {})[0].payload);
  try {
    run(*session, c);
    ADD_FAILURE() << "a job on a lost node must not start";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lost contact with n2"), std::string::npos) << e.what();
    EXPECT_EQ(e.messages().back(), "nothing was started");
  }
  // Without it, the other two nodes still run jobs.
  ClusterSpec without = c;
  without.nodes[1].slots.fixed = 0;
  EXPECT_EQ(run(*session, without).end, JobEnd::Completed);
  EXPECT_EQ(transport_->agents_started(), 3);
}

TEST_F(SessionTest, AFailedStepLeavesTheSessionUsable) {
  ClusterSpec c = cluster(2);
  node(2).exit_code = [](int job, int rank) { return job == 1 && rank == 3 ? 7 : 0; };
  auto session = open(c);
  JobResult failed = run(*session, c);
  EXPECT_EQ(failed.end, JobEnd::RankFailed);
  EXPECT_EQ(failed.first_failed_rank, 3);
  EXPECT_EQ(failed.exit_code(), 7);
  EXPECT_TRUE(session->usable(0) && session->usable(1));
  EXPECT_EQ(run(*session, c).end, JobEnd::Completed);
  EXPECT_EQ(transport_->connections(), 2);
}

TEST_F(SessionTest, ANodeThatFallsSilentIsLostWithinTheHeartbeatTimeout) {
  ClusterSpec c = cluster(2);
  node(1).silent_from_run = 1;
  node(1).exit_code = [](int, int) { return 0; };
  auto session = open(c);
  auto start = std::chrono::steady_clock::now();
  JobResult result = run(*session, c);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(result.end, JobEnd::NodeLost);
  ASSERT_FALSE(result.notes.empty());
  EXPECT_NE(result.notes[0].find("lost contact with n1: nothing heard from it for"), std::string::npos)
      << result.notes[0];
  EXPECT_LT(took, std::chrono::seconds(20));  // a bound on a hang, not a timing measurement
  EXPECT_FALSE(session->usable(0));
  EXPECT_TRUE(session->usable(1));
}

// A JobOutput whose writes fail, as a full disk or a closed terminal would make them.
struct ThrowingOutput : JobOutput {
  void line(int, OutputStream, std::string_view) override { throw std::runtime_error("disk full"); }
  void flush() override {}
};

TEST_F(SessionTest, AnExceptionInTheHeadStopsEveryNodesRanks) {
  ClusterSpec c = cluster(2);
  for (int i : {1, 2}) {
    node(i).ranks_wait_for_stop = true;
    node(i).prints = "working";
  }
  auto session = open(c);
  RankPlan plan = make_rank_plan(c, std::nullopt, MapBy::Slot);
  LaunchRequest request;
  request.argv = {"sleep", "600"};
  ThrowingOutput output;
  EXPECT_THROW(run_over_session(*session, plan, request, TeardownPolicy{}, output, {}), std::runtime_error);
  // Each node was told twice (the second stop is SIGKILL at once), and is not used again.
  EXPECT_FALSE(session->usable(0));
  EXPECT_FALSE(session->usable(1));
  session.reset();  // every link's thread has sent what it had
  auto frames = transport_->frames_received();
  for (const char* host : {"n1", "n2"})
    EXPECT_EQ(std::count(frames.begin(), frames.end(), std::string(host) + " STOP"), 2) << host;
}

int threads_now() {
  return int(std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                           std::filesystem::directory_iterator()));
}

// The threads of this process once those exiting are gone, waiting up to 2 s for the count to
// come down to `at_most`: a joined thread can still be listed in /proc/self/task for a moment
// after pthread_join returns (the kernel clears its tid before it has finished exiting).
int threads_settled_to(int at_most) {
  int n = threads_now();
  for (int tries = 0; tries < 200 && n > at_most; ++tries) {
    std::this_thread::sleep_for(milliseconds(10));
    n = threads_now();
  }
  return n;
}

// The head's threads do not grow with the nodes: a few drivers poll every link, and every node
// is still heard from, asked and run on, whether its channel has a descriptor to poll (as an
// SSH socket does) or not.
TEST_F(SessionTest, TheHeadDrivesManyNodesOnAFewThreads) {
  constexpr int kNodes = 64;
  // A sanitizer's runtime starts a helper thread of its own with the first thread the
  // program makes: made here, it is counted in `before`, not as the session's.
  std::thread([] {}).join();
  const int first = threads_settled_to(1);
  for (bool with_descriptor : {true, false}) {
    transport_ = std::make_shared<FakeAgentTransport>();
    ClusterSpec c = cluster(kNodes);
    for (int i = 1; i <= kNodes; ++i) node(i).gives_wait_fd = with_descriptor;
    const int before = threads_settled_to(first);
    SessionOptions options;
    options.heartbeat_timeout = milliseconds(5000);  // the fake beats only when it is read
    auto session = ClusterSession::open(transport_, c, options, {});
    EXPECT_LE(threads_now() - before, 4) << "with_descriptor " << with_descriptor;
    std::vector<std::pair<size_t, std::string>> asks;
    for (size_t i = 0; i < kNodes; ++i) asks.emplace_back(i, R"({"op":"ports"})");
    for (const auto& a : session->ask(asks, milliseconds(5000), {}))
      EXPECT_EQ(a.payload, R"({"ports":[29500,29501]})");
    EXPECT_EQ(run(*session, c).end, JobEnd::Completed);
    EXPECT_EQ(run(*session, c).end, JobEnd::Completed);
    session.reset();
    EXPECT_EQ(threads_settled_to(before), before);
  }
}

}  // namespace
}  // namespace muster
