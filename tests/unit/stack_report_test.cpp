// The merge and the judge over stacks as the capture records them: each node merges its own
// ranks, the head merges the nodes' answers as they cross the wire, and the judge names the
// rank that is not where the others wait.
#include <functional>

#include <gtest/gtest.h>

#include "launcher/error.h"
#include "launcher/job/stack_judge.h"
#include "launcher/local/stack_tree.h"

namespace muster {
namespace {

// Main threads as a CPython 3.11 rank of torch Gloo shows them (recorded, then trimmed).
const std::vector<std::string> kInAllReduce = {
    "<module> (/tmp/hang.py:9)",
    "wrapper (/usr/lib/python3/dist-packages/torch/distributed/c10d_logger.py:47)",
    "all_reduce (/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:1536)",
    "c10d::ProcessGroupGloo::AsyncWork::wait",
    "std::condition_variable::wait",
    "__futex_abstimed_wait_common",
};
const std::vector<std::string> kAsleep = {
    "<module> (/tmp/hang.py:5)",
    "__GI___clock_nanosleep",
};
const std::vector<std::string> kHelperThread = {"start_thread", "gloo::transport::tcp::Loop::run", "epoll_wait"};

ProcessStacks rank_at(const std::vector<std::string>& main_path) {
  ProcessStacks p;
  p.threads.push_back({100, main_path});
  p.threads.push_back({101, kHelperThread});
  return p;
}

ProcessStacks gone() {
  ProcessStacks p;
  p.state = ProcessStacks::State::Gone;
  p.note = "the process has ended";
  return p;
}

// 8 ranks on 4 nodes, 2 each; `where(rank)` gives each rank's stacks.
StackReport gathered(const std::function<ProcessStacks(int)>& where) {
  StackReport report;
  report.when = StacksWhen::Timeout;
  for (int node = 0; node < 4; ++node) {
    std::vector<std::pair<int, ProcessStacks>> mine;
    for (int rank = 2 * node; rank < 2 * node + 2; ++rank) {
      mine.emplace_back(rank, where(rank));
      report.host_of_rank.push_back("10.88.0." + std::to_string(11 + node));
    }
    // As the head receives it: through the wire form.
    merge_stacks(report.stacks, merged_stacks_from_json(to_json(merge_rank_stacks(mine))));
  }
  return report;
}

TEST(StackJudge, TheRankNotWhereTheOthersWaitIsNamedWithWhereItIs) {
  const StackReport report = gathered([](int rank) { return rank_at(rank == 5 ? kAsleep : kInAllReduce); });
  const StackVerdict verdict = judge_stacks(report);
  EXPECT_EQ(verdict.read, 8);
  ASSERT_TRUE(verdict.majority);
  EXPECT_EQ(verdict.majority->ranks, (std::vector<int>{0, 1, 2, 3, 4, 6, 7}));
  EXPECT_EQ(place_name(verdict.majority->path),
            "all_reduce (/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:1536)");
  ASSERT_EQ(verdict.elsewhere.size(), 1u);
  EXPECT_EQ(verdict.elsewhere[0].rank, 5);
  EXPECT_EQ(innermost_frames(verdict.elsewhere[0].path), "__GI___clock_nanosleep <- <module> (/tmp/hang.py:5)");
  EXPECT_FALSE(verdict.all_in_one_place);
  EXPECT_TRUE(verdict.gone.empty());
  // Every thread merged: the helper threads of all 8 ranks are one path.
  const auto& threads = report.stacks.threads;
  ASSERT_FALSE(threads.empty());
  EXPECT_EQ(threads.front().path, kHelperThread);
  EXPECT_EQ(threads.front().threads, 8);
  EXPECT_EQ(rank_ranges(threads.front().ranks), "0-7");
}

TEST(StackJudge, ARankThatEndedIsGoneNotStuck) {
  const StackReport report = gathered([](int rank) { return rank == 3 ? gone() : rank_at(kInAllReduce); });
  const StackVerdict verdict = judge_stacks(report);
  EXPECT_EQ(verdict.gone, std::vector<int>{3});
  EXPECT_TRUE(verdict.elsewhere.empty());
  EXPECT_TRUE(verdict.all_in_one_place);
  EXPECT_EQ(verdict.read, 7);
}

TEST(StackJudge, AllInOnePlaceIsSaidAsSuch) {
  const StackVerdict verdict = judge_stacks(gathered([](int) { return rank_at(kInAllReduce); }));
  EXPECT_TRUE(verdict.all_in_one_place);
  ASSERT_TRUE(verdict.majority);
  EXPECT_EQ(verdict.majority->ranks.size(), 8u);
  EXPECT_TRUE(verdict.elsewhere.empty());
}

TEST(StackJudge, AnEvenSplitHasNoMajorityAndNamesNoRank) {
  const StackReport report = gathered([](int rank) { return rank_at(rank < 4 ? kAsleep : kInAllReduce); });
  const StackVerdict verdict = judge_stacks(report);
  EXPECT_FALSE(verdict.majority);
  EXPECT_TRUE(verdict.elsewhere.empty());
  EXPECT_EQ(report.stacks.main.size(), 2u);
}

// MPICH's ranks poll in a barrier: caught at different frames of its progress loop, they are
// still in one call, and the rank spinning in its own loop is the one named.
TEST(StackJudge, RanksSpinningInOneCallAreTogetherAndTheOddSpinnerIsNamed) {
  const std::vector<std::string> in_barrier = {"_start", "__libc_start_main", "main", "PMPI_Barrier",
                                               "MPIR_Barrier_impl", "MPIDI_CH3I_Progress"};
  const StackVerdict verdict = judge_stacks(gathered([&](int rank) {
    if (rank == 5) return rank_at({"_start", "__libc_start_main", "main", "spin_here"});
    auto path = in_barrier;
    if (rank == 6) path.resize(5);  // caught a frame higher in the same wait
    else path.push_back(rank % 2 ? "MPID_nem_tcp_connpoll" : "poll");
    return rank_at(path);
  }));
  ASSERT_TRUE(verdict.majority);
  EXPECT_EQ(verdict.majority->path, in_barrier);
  EXPECT_EQ(verdict.majority->ranks, (std::vector<int>{0, 1, 2, 3, 4, 6, 7}));
  EXPECT_EQ(place_name(verdict.majority->path), "PMPI_Barrier");
  ASSERT_EQ(verdict.elsewhere.size(), 1u);
  EXPECT_EQ(verdict.elsewhere[0].rank, 5);
  EXPECT_EQ(innermost_frames(verdict.elsewhere[0].path, 2), "spin_here <- main");
}

TEST(StackTree, ANodeAnswerPastTheBoundsIsRefused) {
  std::string path = "[";
  for (size_t i = 0; i < kMaxStackFrames + kMaxPythonFrames + 1; ++i) path += std::string(i ? "," : "") + "\"f\"";
  path += "]";
  EXPECT_THROW(merged_stacks_from_json(R"({"ranks":[],"main":[{"path":)" + path + R"(,"ranks":[1]}],"threads":[]})"),
               Error);
  EXPECT_THROW(merged_stacks_from_json("not json"), Error);
}

}  // namespace
}  // namespace muster
