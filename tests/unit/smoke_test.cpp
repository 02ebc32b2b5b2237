// The smoke sweep and its arithmetic, against a recording fake collective.
#include "probes/smoke.h"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "probes/comm_nccl.h"
#include "tests/fakes/recording_collective.h"

namespace muster {
namespace {

using testing::RecordingCollective;

// One all-reduce of 64 bytes, no warmup: the one run is the one that is checked.
SmokeSettings one_checked_all_reduce() {
  SmokeSettings s;
  s.ops = {CollectiveOp::AllReduce};
  s.min_bytes = s.max_bytes = 64;
  s.iters = 1;
  s.warmup = 0;
  return s;
}

TEST(SmokeArithmetic, SizesFollowTheStepFactorAndEndAtTheMaximum) {
  EXPECT_EQ(sweep_sizes(8, 128, 2), (std::vector<size_t>{8, 16, 32, 64, 128}));
  EXPECT_EQ(sweep_sizes(8, 100, 4), (std::vector<size_t>{8, 32, 100}));
  EXPECT_EQ(sweep_sizes(64, 64, 2), (std::vector<size_t>{64}));
  EXPECT_TRUE(sweep_sizes(64, 8, 2).empty());
}

TEST(SmokeArithmetic, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::AllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::AllGather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::ReduceScatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::Broadcast, 16), 1.0);
  // All-gather and reduce-scatter sizes are the total: per rank is a 1/n share.
  EXPECT_EQ(elements_per_rank(CollectiveOp::AllGather, 4096, 4), 256u);
  EXPECT_EQ(elements_per_rank(CollectiveOp::AllReduce, 4096, 4), 1024u);
  EXPECT_EQ(elements_per_rank(CollectiveOp::ReduceScatter, 8, 4), 1u);
}

// Time as nccl-tests reports it by default: the mean over ranks; the slowest time kept apart.
TEST(SmokeArithmetic, RowsAverageTheRanksKeepTheSlowestTimeAndDeriveBandwidth) {
  std::map<int, std::vector<SmokeEvent>> results;
  for (int rank = 0; rank < 4; ++rank)
    results[rank].push_back({SmokeEvent::Kind::Result, 7, "world", CollectiveOp::AllReduce,
                             1000000, 250000, rank == 2 ? 2000.0 : 1000.0, rank == 3 ? 5 : 0, ""});
  auto rows = summarize_smoke(results);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].max_time_us, 2000.0);
  EXPECT_DOUBLE_EQ(rows[0].time_us, 1250.0);          // (3 x 1000 + 2000) / 4
  EXPECT_DOUBLE_EQ(rows[0].algbw_gbps, 0.8);          // 1e6 B / 1.25 ms
  EXPECT_DOUBLE_EQ(rows[0].busbw_gbps, 0.8 * 1.5);    // 2(n-1)/n for n = 4
  EXPECT_EQ(rows[0].wrong, 5);
}

TEST(SmokeArithmetic, RanksThatNeverArrivedAreThoseBehindTheFailingStep) {
  EXPECT_EQ(ranks_never_arrived({{0, 9}, {1, 9}, {2, 8}, {3, 9}}, 4, 9), std::vector<int>{2});
  EXPECT_EQ(ranks_never_arrived({{0, 9}}, 3, 9), (std::vector<int>{1, 2}));
}

TEST(SmokeSweep, RanksThatEnteredTheFailingStepAndNeverLeftItAreStuckInIt) {
  auto error_at = [](int seq) {
    SmokeEvent e;
    e.kind = SmokeEvent::Kind::Error;
    e.seq = seq;
    return e;
  };
  SmokeEvent earlier_result;
  earlier_result.kind = SmokeEvent::Kind::Result;
  earlier_result.seq = 8;
  // Ranks 0 and 3 timed out in step 9, rank 1 is stuck in it, rank 2 never got there.
  std::map<int, std::vector<SmokeEvent>> events = {
      {0, {earlier_result, error_at(9)}}, {1, {earlier_result}}, {3, {earlier_result, error_at(9)}}};
  EXPECT_EQ(ranks_stuck_in({{0, 9}, {1, 9}, {2, 8}, {3, 9}}, events, 9), std::vector<int>{1});
  EXPECT_TRUE(ranks_stuck_in({{0, 9}, {1, 9}}, {{0, {error_at(9)}}, {1, {error_at(9)}}}, 9).empty());
}

TEST(SmokeSweep, RunsEveryOpAtEverySizeAndChecksEveryElement) {
  auto log = std::make_shared<std::vector<std::string>>();
  RecordingCollective world(1, 4, log);
  SmokeSettings s;
  s.min_bytes = 1024;
  s.max_bytes = 4096;
  s.step_factor = 4;
  s.iters = 2;
  s.warmup = 1;
  std::vector<SmokeEvent> events;
  run_smoke_sweep(world, s, {0, 0, 1, 1}, [&](const SmokeEvent& e) { events.push_back(e); });
  int results = 0;
  for (const auto& e : events)
    if (e.kind == SmokeEvent::Kind::Result) {
      ++results;
      EXPECT_EQ(e.wrong, 0) << op_name(e.op) << " " << e.bytes;
    }
  EXPECT_EQ(results, 1 + 4 * 2);  // the opening barrier, then 4 ops x 2 sizes
  // Per size: warmup + a barrier to start together + the timed iterations; all-reduce runs
  // in place, and its first run, from the input, is both the checked run and the warm-up.
  EXPECT_EQ(std::count(log->begin(), log->end(), "world all_reduce 256"), 3);
  EXPECT_EQ(std::count(log->begin(), log->end(), "world all_gather 256"), 3);  // 4096 B / 4 ranks / 4 B
}

// torch.distributed and DDP all-reduce in place; out of place Gloo first copies the input
// into the output, a cost a training job does not pay. Each in-place run adds into the
// last one's result, so the checked run is the first, from the input: it is also the
// first warm-up, and an extra untimed run when there is none.
TEST(SmokeSweep, AllReduceIsTimedInPlaceAndCheckedOnItsFirstRunFromTheInput) {
  for (int warmup : {0, 2}) {
    auto log = std::make_shared<std::vector<std::string>>();
    RecordingCollective world(1, 3, log);
    SmokeSettings s = one_checked_all_reduce();
    s.warmup = warmup;
    s.iters = 5;
    std::vector<SmokeEvent> events;
    run_smoke_sweep(world, s, {0, 1, 2}, [&](const SmokeEvent& e) { events.push_back(e); });
    EXPECT_EQ(world.in_place_calls, std::max(warmup, 1) + 5) << warmup;
    long results = 0;
    for (const auto& e : events)
      if (e.kind == SmokeEvent::Kind::Result && e.op == CollectiveOp::AllReduce) {
        ++results;
        EXPECT_EQ(e.wrong, 0) << warmup;
      }
    EXPECT_EQ(results, 1) << warmup;
  }
}

TEST(SmokeSweep, AWrongElementIsCounted) {
  auto log = std::make_shared<std::vector<std::string>>();
  RecordingCollective world(0, 2, log);
  SmokeSettings s = one_checked_all_reduce();
  std::vector<SmokeEvent> events;
  // Corrupt one element of every all-reduce of the step, the checked one among them.
  run_smoke_sweep(world, s, {0, 1}, [&](const SmokeEvent& e) {
    if (e.op == CollectiveOp::AllReduce) world.corrupt = e.kind == SmokeEvent::Kind::Enter;
    events.push_back(e);
  });
  long wrong = 0;
  for (const auto& e : events)
    if (e.kind == SmokeEvent::Kind::Result && e.op == CollectiveOp::AllReduce) wrong += e.wrong;
  EXPECT_EQ(wrong, 1);
}

TEST(SmokeSweep, SplitAndPairsFormTheirGroupsInTheSameOrderOnEveryRank) {
  auto log = std::make_shared<std::vector<std::string>>();
  RecordingCollective world(0, 6, log);
  SmokeSettings s = one_checked_all_reduce();
  s.split_node = true;
  s.pairs = true;
  run_smoke_sweep(world, s, {0, 0, 1, 1, 2, 2}, [](const SmokeEvent&) {});
  std::vector<std::string> groups;
  for (const auto& line : *log)
    if (line.rfind("subgroup", 0) == 0) groups.push_back(line);
  EXPECT_EQ(groups, (std::vector<std::string>{"subgroup node 0 of 2", "subgroup node 1 of 2",
                                              "subgroup node 2 of 2", "subgroup across nodes of 3",
                                              // the pair search: the ring's pairs, a round each
                                              // here (3 nodes), every group's name new
                                              "subgroup pair 0-1 round 1 of 2", "subgroup pair 1-2 round 2 of 2",
                                              "subgroup pair 2-0 round 3 of 2"}));
}

// Without --pairs, the search runs when the world's largest all-reduce falls below the
// expectation, and only then.
TEST(SmokeSweep, AWorldAllReduceBelowTheExpectationStartsThePairSearch) {
  for (double expected_gbps : {0.0, 1e12}) {
    auto log = std::make_shared<std::vector<std::string>>();
    RecordingCollective world(0, 4, log);
    SmokeSettings s = one_checked_all_reduce();
    s.pairs_below_busbw_gbps = expected_gbps;
    const auto found = run_smoke_sweep(world, s, {0, 1, 2, 3}, [](const SmokeEvent&) {});
    EXPECT_EQ(found.has_value(), expected_gbps > 0);
    EXPECT_EQ(std::count(log->begin(), log->end(), "subgroup pair 0-1 round 1 of 2"), expected_gbps > 0 ? 1 : 0);
  }
}

// A pair's timed loop runs for a quarter of its round's budget, one iteration at least and a
// thousand at most: a link at 30 Mbit/s ran 25 iterations of 4 MiB per pair, and smoke --pairs
// ran for minutes.
TEST(SmokeSweep, APairRunsTheIterationsThatFitInItsRoundsBudget) {
  for (double budget_s : {1e-9, 1000.0}) {
    auto log = std::make_shared<std::vector<std::string>>();
    RecordingCollective world(0, 2, log);
    SmokeSettings s = one_checked_all_reduce();
    s.ops.clear();  // the pairs alone
    s.iters = 20;
    s.warmup = 5;
    s.pairs = true;
    s.pair_round_s = budget_s;
    run_smoke_sweep(world, s, {0, 1}, [](const SmokeEvent&) {});
    // The checked run, one timed run that sets the chunk, then chunks until the window has
    // passed (bounded by a thousand, not by iters): no other warm-up.
    EXPECT_EQ(std::count(log->begin(), log->end(), "pair 0-1 round 1 all_reduce 16"), budget_s < 1 ? 3 : 1002)
        << fmt::format("{}", fmt::join(*log, "\n"));
  }
}

// The pairs of a round are timed from one moment: each waits on a world barrier after its
// checked run, and a rank in no pair passes the same barrier, once a round. A pair that
// connected first ran its loop alone while the others set up, at up to 13 Gbit/s beside
// their 2, and made two healthy nodes of four look slow.
TEST(SmokeSweep, ThePairsOfARoundAreTimedFromOneBarrier) {
  SmokeSettings s = one_checked_all_reduce();
  s.ops.clear();  // the pairs alone
  s.pairs = true;
  // Rank 0 is in the first round's pair (0,1); rank 2 of three nodes is in none.
  auto in_pair = std::make_shared<std::vector<std::string>>();
  RecordingCollective rank0(0, 3, in_pair);
  run_smoke_sweep(rank0, s, {0, 1, 2}, [](const SmokeEvent&) {});
  const auto checked = std::find(in_pair->begin(), in_pair->end(), "pair 0-1 round 1 all_reduce 16");
  ASSERT_NE(checked, in_pair->end()) << fmt::format("{}", fmt::join(*in_pair, "\n"));
  EXPECT_EQ(*std::next(checked), "world barrier 0") << fmt::format("{}", fmt::join(*in_pair, "\n"));

  auto in_none = std::make_shared<std::vector<std::string>>();
  RecordingCollective rank2(2, 3, in_none);
  run_smoke_sweep(rank2, s, {0, 1, 2}, [](const SmokeEvent&) {});
  const auto round1 = std::find(in_none->begin(), in_none->end(), "subgroup pair 0-1 round 1 of 2");
  const auto round2 = std::find(round1, in_none->end(), "subgroup pair 1-2 round 2 of 2");
  ASSERT_NE(round2, in_none->end()) << fmt::format("{}", fmt::join(*in_none, "\n"));
  // Round 1, where it has no pair: the barrier, once.
  EXPECT_EQ(std::count(round1, round2, "world barrier 0"), 1) << fmt::format("{}", fmt::join(*in_none, "\n"));
}

TEST(NcclLoading, WithoutAGpuTheReasonIsOneLineThatPointsToGloo) {
  auto why = nccl_unavailable_reason();
  if (!why) GTEST_SKIP() << "NCCL and a CUDA device are available here";
  EXPECT_EQ(why->find('\n'), std::string::npos);
  EXPECT_NE(why->find("--backend gloo"), std::string::npos) << *why;
}

}  // namespace
}  // namespace muster
