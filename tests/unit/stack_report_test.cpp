// The merge and the judge over stacks as the capture records them: each node merges its own
// ranks, the head merges the nodes' answers as they cross the wire, and the judge names the
// rank that is not where the others wait.
#include <functional>

#include <gtest/gtest.h>

#include "cli/stack_report_text.h"
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

// The report as the head sends it to `muster stacks`, and as that prints it.
TEST(StackReport, CrossesToMusterStacksWholeAndIsToldInWords) {
  StackReport sent = gathered([](int rank) { return rank == 3 ? gone() : rank_at(rank == 5 ? kAsleep : kInAllReduce); });
  sent.when = StacksWhen::Request;
  sent.unanswered = {"10.88.0.19"};
  sent.ended = {{3, "exit 1"}};
  sent.stacks.ranks[1].note = "no native frame of threads 101 could be read";
  sent.stacks.ranks[1].held_ms = 1.25;
  const StackReport got = stack_report_from_json(to_json(sent));
  EXPECT_EQ(got.when, StacksWhen::Request);
  EXPECT_EQ(got.host_of_rank, sent.host_of_rank);
  EXPECT_EQ(got.unanswered, sent.unanswered);
  EXPECT_EQ(got.ended, sent.ended);
  ASSERT_EQ(got.stacks.ranks.size(), sent.stacks.ranks.size());
  for (size_t i = 0; i < got.stacks.ranks.size(); ++i) {
    EXPECT_EQ(got.stacks.ranks[i].rank, sent.stacks.ranks[i].rank);
    EXPECT_EQ(got.stacks.ranks[i].state, sent.stacks.ranks[i].state);
    EXPECT_EQ(got.stacks.ranks[i].note, sent.stacks.ranks[i].note);
    EXPECT_EQ(got.stacks.ranks[i].held_ms, sent.stacks.ranks[i].held_ms);
  }
  ASSERT_EQ(got.stacks.main.size(), sent.stacks.main.size());
  for (size_t i = 0; i < got.stacks.main.size(); ++i) {
    EXPECT_EQ(got.stacks.main[i].path, sent.stacks.main[i].path);
    EXPECT_EQ(got.stacks.main[i].ranks, sent.stacks.main[i].ranks);
    EXPECT_EQ(got.stacks.main[i].threads, sent.stacks.main[i].threads);
  }
  EXPECT_EQ(got.stacks.threads.size(), sent.stacks.threads.size());

  const std::string text = cli::stack_report_text(got);
  EXPECT_NE(text.find("muster: stacks of 8 ranks on 10.88.0.[11-14], read on request:\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  rank 5 (10.88.0.13) is not in all_reduce "
                      "(/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:1536), where the 6 "
                      "other ranks wait: it is in __GI___clock_nanosleep <- <module> (/tmp/hang.py:5)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  rank 3 (10.88.0.12) has ended (exit 1) while the others run"), std::string::npos) << text;
  EXPECT_NE(text.find("  10.88.0.19 did not answer in time\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  note: no native frame of threads 101 could be read\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  ranks 0-2,4,6-7 on 10.88.0.[11-14]:\n"), std::string::npos) << text;
}

// Every rank in one call, the innermost frames apart: the place named is the call they share,
// not the first of their paths.
TEST(StackReport, AllInOnePlaceNamesTheCallTheRanksShare) {
  // Ranks 0-2, the largest group, went a Python frame deeper inside the all-reduce; the
  // others are in its wait, caught at three different frames.
  const StackReport report = gathered([](int rank) {
    std::vector<std::string> path(kInAllReduce.begin(), kInAllReduce.begin() + 3);
    if (rank <= 2) {
      path.insert(path.end(), {"helper (/tmp/deeper.py:7)", "poll"});
    } else {
      path.push_back("c10d::ProcessGroupGloo::AsyncWork::wait");
      path.push_back(rank <= 4 ? "futex_wait" : rank <= 6 ? "syscall" : "sched_yield");
    }
    return rank_at(path);
  });
  const std::string text = cli::stack_report_text(report);
  EXPECT_NE(text.find("  all 8 ranks read wait in the same place: all_reduce "
                      "(/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:1536)\n"),
            std::string::npos)
      << text;
}

// What the ranks' libraries said crosses with each node's stacks, is told whose node it came
// from, and is said once however many nodes said it.
TEST(StackReport, WhatNcclsRasServiceAndTorchsFlightRecorderSaidIsCarriedAndTold) {
  StackReport report;
  report.when = StacksWhen::Timeout;
  for (int node = 0; node < 2; ++node) {
    MergedStacks mine = merge_rank_stacks({{node, rank_at(kInAllReduce)}});
    mine.nccl_ras.push_back({"", "localhost:28028",
                             {"#0-0 (7b6e4f2a9c1d3e58) MISMATCH",
                              "  Rank 5 has launched up to operation 11 -- GPU 1 managed by process 4242 on node n3"},
                             ""});
    FlightRecorderDump dump;
    dump.rank = node;
    dump.source = "/tmp/nccl_trace_rank_" + std::to_string(node);
    dump.bytes = std::string("\x80\x04\x95\0binary", 10);
    mine.flight_recorder.push_back(dump);
    report.host_of_rank.push_back("n" + std::to_string(node + 1));
    const std::string host = "n" + std::to_string(node + 1);
    merge_stacks(report.stacks, merged_stacks_from_json(to_json(mine)), host);
  }
  ASSERT_EQ(report.stacks.nccl_ras.size(), 2u);
  EXPECT_EQ(report.stacks.nccl_ras[1].host, "n2");
  ASSERT_EQ(report.stacks.flight_recorder.size(), 2u);
  EXPECT_EQ(report.stacks.flight_recorder[0].bytes, std::string("\x80\x04\x95\0binary", 10));
  EXPECT_EQ(report.stacks.flight_recorder[1].host, "n2");
  report.stacks.flight_recorder[0].file = "/work/muster-flight-recorder-j1/nccl_trace_rank_0";
  report.stacks.flight_recorder[0].bytes.clear();
  report.stacks.flight_recorder[1].bytes.clear();
  report.stacks.flight_recorder[1].note = "not written to /work/muster-flight-recorder-j1: No space left on device";

  const std::string text = cli::stack_report_text(stack_report_from_json(to_json(report)));
  EXPECT_NE(text.find("  NCCL's RAS service (asked on n[1-2]) reports:\n"
                      "      #0-0 (7b6e4f2a9c1d3e58) MISMATCH\n"
                      "        Rank 5 has launched up to operation 11 -- GPU 1 managed by process 4242 on node n3\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  torch's flight recorder: the dump of rank 0 collected in /work/muster-flight-recorder-j1/\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  note: rank 1's flight recorder (n2): not written to"), std::string::npos) << text;
  const auto json = cli::stack_report_json(report);
  EXPECT_EQ(json["nccl_ras"].size(), 2u);
  EXPECT_EQ(json["flight_recorder"][0]["file"], "/work/muster-flight-recorder-j1/nccl_trace_rank_0");

  // A node's service that could not be asked says why, once.
  report.stacks.nccl_ras = {{"n1", "localhost:28028", {}, "nothing answers at localhost:28028 (Connection refused)"}};
  EXPECT_NE(cli::stack_report_text(report).find("  NCCL's RAS service could not be asked on n1: nothing answers"),
            std::string::npos);
}

TEST(StackTree, ANodeAnswerPastTheBoundsIsRefused) {
  std::string path = "[";
  for (size_t i = 0; i < kMaxStackFrames + kMaxPythonFrames + 1; ++i) path += std::string(i ? "," : "") + "\"f\"";
  path += "]";
  EXPECT_THROW(merged_stacks_from_json(R"({"ranks":[],"main":[{"path":)" + path + R"(,"ranks":[1]}],"threads":[]})"),
               Error);
  EXPECT_THROW(merged_stacks_from_json("not json"), Error);
  const std::string empty = R"("ranks":[],"main":[],"threads":[])";
  EXPECT_THROW(merged_stacks_from_json("{" + empty + R"(,"flight_recorder":[{"rank":1,"host":"","source":"",)"
                                       R"("file":"","note":"","bytes64":"not base64!"}]})"),
               Error);
  std::string lines;
  for (size_t i = 0; i <= kMaxRasLines; ++i) lines += std::string(i ? "," : "") + "\"x\"";
  EXPECT_THROW(merged_stacks_from_json("{" + empty + R"(,"nccl_ras":[{"host":"","address":"","error":"","lines":[)" +
                                       lines + "]}]}"),
               Error);
}

}  // namespace
}  // namespace muster
