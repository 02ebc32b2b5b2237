// muster smoke with real probe ranks on this machine (Gloo), and its failure reports.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/build_paths.h"
#include "tests/support/command_runner.h"

namespace muster::testing {
namespace {

bool has_problem(const nlohmann::json& report, const std::string& text) {
  for (const auto& p : report["problems"])
    if (p["message"].get<std::string>().find(text) != std::string::npos) return true;
  return false;
}

TEST(Smoke, FourLocalRanksOnGlooPassWithNcclTestsArithmetic) {
  auto r = run_muster({"smoke", "-n", "4", "--backend", "gloo", "--max-bytes", "256K", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["passed"], true);
  EXPECT_EQ(report["backend"], "gloo");
  std::set<int> ranks;
  for (const auto& h : report["hellos"]) {
    ranks.insert(h["rank"].get<int>());
    EXPECT_EQ(h["world_size"], 4);
    EXPECT_FALSE(h["cpuset"].get<std::string>().empty());
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));
  std::set<std::string> ops;
  for (const auto& row : report["results"]) {
    ops.insert(row["op"].get<std::string>());
    EXPECT_EQ(row["wrong"], 0);
    EXPECT_EQ(row["ranks"], 4);
    double t = row["time_us"], algbw = row["algbw_gbps"], busbw = row["busbw_gbps"];
    size_t bytes = row["bytes"];
    ASSERT_GT(t, 0);
    EXPECT_NEAR(algbw, double(bytes) / 1e9 / (t / 1e6), algbw * 1e-9);
    // nccl-tests' factors for n = 4.
    double factor = row["op"] == "all_reduce" ? 1.5 : row["op"] == "broadcast" ? 1.0 : 0.75;
    EXPECT_NEAR(busbw, algbw * factor, busbw * 1e-9) << row.dump();
    EXPECT_EQ(row["time_us_by_rank"].size(), 4u);
    EXPECT_GE(row["max_time_us"].get<double>(), t);  // the slowest rank's time, no rank named
    EXPECT_FALSE(row.contains("slowest_rank"));
  }
  EXPECT_EQ(ops, (std::set<std::string>{"all_reduce", "all_gather", "reduce_scatter", "broadcast"}));
}

TEST(Smoke, ProbeRanksShowAsMusterInPsAndTop) {
  // Rank 1 stalls at its first collective, so the ranks stay up long enough to be looked at.
  // The stall setting is also the mark by which this test tells its ranks from other tests'.
  const std::string stall = fmt::format("MUSTER_SMOKE_STALL=1:2:{}", getpid());
  RunningCommand smoke({muster_binary(), "smoke", "-n", "2", "--timeout", "120", "-x", stall});
  std::vector<pid_t> ranks;
  ASSERT_TRUE(wait_until([&] { return (ranks = processes_running({"muster", "smoke-rank"}, stall)).size() == 2; }));
  // The kernel names a process after the file it executed ("exe" for /proc/self/exe) until
  // muster renames itself, first thing in main.
  auto comm = [](pid_t pid) {
    std::string name = process_file(pid, "comm");
    if (!name.empty() && name.back() == '\n') name.pop_back();
    return name;
  };
  EXPECT_TRUE(wait_until([&] { return comm(ranks[0]) == "muster" && comm(ranks[1]) == "muster"; },
                         std::chrono::milliseconds(5000)))
      << "top shows " << comm(ranks[0]) << " and " << comm(ranks[1]);
  smoke.signal(SIGINT);  // the stalled rank would hold the test until --timeout
  EXPECT_EQ(smoke.wait().exit_code, 130);
}

TEST(Smoke, ReduceScatterIsRightForGroupsThatAreNotAPowerOfTwo) {
  auto r = run_muster({"smoke", "-n", "3", "--max-bytes", "64K", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["passed"], true);
}

TEST(Smoke, AMachineListedTwiceIsReportedAsDuplicatedRanks) {
  auto r = run_muster({"smoke", "-H", "localhost:2,127.0.0.1:2", "--max-bytes", "1K", "--json"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_TRUE(has_problem(report, "ranks 0 and 2 are duplicates")) << report["problems"].dump(2);
  EXPECT_TRUE(has_problem(report, "ranks 1 and 3 are duplicates")) << report["problems"].dump(2);
}

TEST(Smoke, SplitAndPairsRunWithinAndAcrossNodes) {
  auto r = run_muster({"smoke", "-H", "localhost:2,127.0.0.1:2", "--max-bytes", "4K", "--split",
                       "node", "--pairs", "--json"});
  auto report = nlohmann::json::parse(r.out);
  std::set<std::string> groups;
  for (const auto& row : report["results"]) groups.insert(row["group"].get<std::string>());
  EXPECT_EQ(groups, (std::set<std::string>{"world", "node 0", "node 1", "across nodes", "pair 0-1"}));
  for (const auto& row : report["results"]) EXPECT_EQ(row["wrong"], 0) << row.dump();
}

// Rank 2's collectives stop returning at step 5, as a wedged device's would. The others give
// up at --timeout; each says so before its connections close, so the report names the hang
// as the cause, whatever the order in which the peers then notice the closed connections.
TEST(Smoke, ACollectiveThatNeverCompletesIsAbortedNamingTheMissingRank) {
  auto r = run_muster({"smoke", "-n", "4", "--max-bytes", "64K", "--timeout", "3", "--json"},
                      {"MUSTER_SMOKE_STALL=2:5"});
  EXPECT_EQ(r.exit_code, 1);
  auto report = nlohmann::json::parse(r.out);
  ASSERT_FALSE(report["problems"].empty());
  const std::string first = report["problems"][0]["message"];
  EXPECT_EQ(first.rfind("rank 2 (", 0), 0u) << "the hung rank comes first: " << report["problems"].dump(2);
  EXPECT_NE(first.find("never finished it, while the others gave up waiting"), std::string::npos) << first;
  EXPECT_TRUE(has_problem(report, "Timed out")) << report["problems"].dump(2);
}

// The smoke-rank process of `rank` started by the muster process `parent` (ctest may run
// other smoke tests at the same time).
pid_t find_rank_process(pid_t parent, int rank) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = pid_t(std::stol(name));
    const std::string text = process_file(pid, "stat");
    auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(text.substr(close + 2));
    char state;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid != parent) continue;
    if (process_file(pid, "cmdline").find("smoke-rank") == std::string::npos) continue;
    const std::string env = process_file(pid, "environ");
    if (env.find(std::string("\0RANK=", 6) + std::to_string(rank) + '\0') != std::string::npos)
      return pid;
  }
  return -1;
}

TEST(Smoke, ARankKilledMidTestFailsTheRunNamingIt) {
  RunningCommand smoke({muster_binary(), "smoke", "-n", "4", "--max-bytes", "16M", "--iters", "200",
                        "--json"});
  pid_t victim = -1;
  ASSERT_TRUE(wait_until([&] { return (victim = find_rank_process(smoke.pid(), 2)) > 0; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // into the sweep
  kill(victim, SIGKILL);
  auto r = smoke.wait();
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_TRUE(has_problem(report, "rank 2 (")) << report["problems"].dump(2);
  EXPECT_TRUE(has_problem(report, "was killed by SIGKILL (signal 9) during the test"))
      << report["problems"].dump(2);
}

// One line per node, the same every run: no race between a rank that found no GPU and one
// that had not said hello yet.
TEST(Smoke, ExplicitNcclWithoutAGpuIsOneClearLine) {
  for (int run = 0; run < 3; ++run) {
    auto r = run_muster({"smoke", "-n", "2", "--backend", "nccl", "--max-bytes", "1K", "--json"});
    EXPECT_EQ(r.exit_code, 1);
    auto report = nlohmann::json::parse(r.out);
    ASSERT_EQ(report["problems"].size(), 1u) << report["problems"].dump(2);
    EXPECT_TRUE(has_problem(report, ": cannot use NCCL: no NVIDIA GPU for its 2 ranks")) << report["problems"].dump(2);
    EXPECT_TRUE(report["hellos"].empty()) << r.out;  // nothing was started
  }
  auto text = run_muster({"smoke", "-n", "2", "--backend", "nccl", "--max-bytes", "1K"});
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_EQ(text.out.find("never said hello"), std::string::npos) << text.out;
}

// As nccl-tests does, each row is printed as soon as it is measured, not at the end: here
// while rank 1 is still stopped before a later step, which keeps muster running until the
// collective's timeout.
TEST(Smoke, EachRowIsPrintedAsSoonAsItIsMeasured) {
  RunningCommand smoke({muster_binary(), "smoke", "-n", "2", "--max-bytes", "1K", "--timeout", "3"},
                       {"MUSTER_SMOKE_STALL=1:5"});
  const std::string early = smoke.read_out_until("   sum    -1 ", std::chrono::seconds(60));
  EXPECT_NE(early.find("# all_reduce (world, 2 ranks)"), std::string::npos) << early;
  // Rank 1 holds muster for the 3 s timeout and the settle after it: a second after the
  // first row, muster runs still unless that row came only at its end.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_TRUE(process_alive(smoke.pid())) << "the first row came only when muster ended:\n" << early;
  auto r = smoke.wait();
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.out.find("FAIL "), std::string::npos) << r.out;
}

}  // namespace
}  // namespace muster::testing
