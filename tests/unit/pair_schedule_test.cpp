// The pair scheduler: every scheduled pair measured once, no node in two measurements at
// once (but the rendezvous node, up to its limit), and a failure retried later, not at once.
#include "probes/pair_schedule.h"

#include <functional>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

namespace muster {
namespace {

using Pair = std::pair<int, int>;
using Clock = PairScheduler::Clock;
using std::chrono::milliseconds;

// Drives a scheduler to its end on a simulated clock: each step 10 ms pass and one
// in-flight pair, chosen at random, ends; `outcome` decides each attempt. Checks on every
// step that no node is in two measurements at once (node 0 excepted, as prober and target
// together, up to `hub_pairs`); returns every attempt in the order it started, with when.
struct Started {
  PairDispatch pair;
  Clock::time_point at;
};
// How many pairs the last drive() settled (done() said their last attempt was in).
size_t settled_by_drive = 0;

std::vector<Started> drive(PairScheduler& scheduler, int nodes, unsigned seed,
                           const std::function<PairOutcome(const PairDispatch&)>& outcome,
                           int hub_pairs = 1) {
  std::mt19937 random(seed);
  settled_by_drive = 0;
  std::vector<Started> started;
  std::vector<PairDispatch> in_flight;
  Clock::time_point now{};
  for (int step = 0; !scheduler.finished() && step < 1'000'000; ++step) {
    now += milliseconds(10);
    for (const auto& d : scheduler.next(now)) {
      started.push_back({d, now});
      in_flight.push_back(d);
    }
    std::vector<int> probing(static_cast<size_t>(nodes), 0), targeted(probing);
    for (const auto& d : in_flight) {
      ++probing[size_t(d.src)];
      ++targeted[size_t(d.dst)];
    }
    for (int node = 0; node < nodes; ++node) {
      const int most = node == 0 ? hub_pairs : 1;
      EXPECT_LE(probing[size_t(node)] + targeted[size_t(node)], most) << "node " << node;
    }
    if (in_flight.empty()) continue;  // a retry that is not due yet
    const size_t k = random() % in_flight.size();
    const PairDispatch d = in_flight[k];
    in_flight.erase(in_flight.begin() + long(k));
    settled_by_drive += scheduler.done(d, outcome(d), now);
  }
  EXPECT_TRUE(scheduler.finished());
  return started;
}

PairOutcome always_reached(const PairDispatch&) { return PairOutcome::Reached; }

TEST(PairScheduler, EveryOrderedPairIsMeasuredOnceAndNoNodeIsInTwoAtOnce) {
  for (int nodes : {2, 3, 7, 16, 33}) {
    for (unsigned seed : {1u, 2u, 3u}) {
      PairScheduler scheduler(nodes, PairSchedule::Every);
      EXPECT_EQ(scheduler.pairs(), size_t(nodes * (nodes - 1)));
      const auto started = drive(scheduler, nodes, seed, always_reached);
      std::set<Pair> seen;
      for (const auto& [d, at] : started) {
        EXPECT_EQ(d.attempt, 1);
        EXPECT_TRUE(seen.insert({d.src, d.dst}).second) << d.src << "->" << d.dst << " twice";
      }
      EXPECT_EQ(seen.size(), size_t(nodes * (nodes - 1))) << nodes << " nodes";
      EXPECT_EQ(settled_by_drive, scheduler.pairs());
    }
  }
}

TEST(PairScheduler, APairStartsAsSoonAsItsEndsAreFreeNotWithTheNextRound) {
  // Four nodes: the first round is 0-3 and 1-2. When 0-3 ends while 1-2 is still measuring,
  // the next pair of 0 and 3 starts without waiting for 1-2.
  PairScheduler scheduler(4, PairSchedule::Every);
  const Clock::time_point now{};
  auto first = scheduler.next(now);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0], (PairDispatch{0, 3, 1, false}));
  EXPECT_EQ(first[1], (PairDispatch{1, 2, 1, false}));
  scheduler.done(first[0], PairOutcome::Reached, now);
  auto then = scheduler.next(now);
  ASSERT_EQ(then.size(), 1u);
  EXPECT_EQ(then[0], (PairDispatch{3, 0, 1, false}));
}

TEST(PairScheduler, AFailureIsRetriedOnceItIsDueNotAtOnce) {
  const int nodes = 8;
  PairScheduler scheduler(nodes, PairSchedule::Every, {.retry_after = milliseconds(500)});
  int failures = 0;
  const auto started = drive(scheduler, nodes, 7, [&](const PairDispatch& d) {
    if (d.src == 2 && d.dst == 5 && d.attempt == 1) {
      ++failures;
      return PairOutcome::Failed;
    }
    return PairOutcome::Reached;
  });
  EXPECT_EQ(failures, 1);
  std::vector<size_t> attempts;
  for (size_t k = 0; k < started.size(); ++k)
    if (started[k].pair.src == 2 && started[k].pair.dst == 5) attempts.push_back(k);
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(started[attempts[1]].pair.attempt, 2);
  // The retry came no sooner than 500 ms after the first attempt (which ended later still).
  EXPECT_GE(started[attempts[1]].at - started[attempts[0]].at, milliseconds(500));
  EXPECT_EQ(settled_by_drive, scheduler.pairs());
}

TEST(PairScheduler, APairIsAVerdictAfterItsAttemptsAndAStarvedOneGetsOneMore) {
  PairScheduler scheduler(2, PairSchedule::Every, {.attempts = 2, .attempts_starved = 3});
  std::map<Pair, int> tries;
  std::map<Pair, int> settled_after;
  Clock::time_point now{};
  while (!scheduler.finished()) {
    now += milliseconds(100);
    for (const auto& d : scheduler.next(now)) {
      const int n = ++tries[{d.src, d.dst}];
      // 0->1 fails on the network every time; 1->0 is starved every time.
      const PairOutcome outcome = d.src == 0 ? PairOutcome::Failed : PairOutcome::Starved;
      if (scheduler.done(d, outcome, now)) settled_after[{d.src, d.dst}] = n;
    }
  }
  EXPECT_EQ(settled_after, (std::map<Pair, int>{{{0, 1}, 2}, {{1, 0}, 3}}));
}

TEST(PairScheduler, APairWhoseNodeIsGoneIsSettledWithoutARetry) {
  PairScheduler scheduler(2, PairSchedule::Every);
  const Clock::time_point now{};
  const auto first = scheduler.next(now);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_TRUE(scheduler.done(first[0], PairOutcome::Abandoned, now));
  const auto second = scheduler.next(now);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].attempt, 1);  // the other direction, not a retry
  EXPECT_FALSE(scheduler.done(second[0], PairOutcome::Failed, now));
  EXPECT_TRUE(scheduler.next(now).empty());  // its retry is not due yet
  EXPECT_FALSE(scheduler.finished());
}

TEST(PairScheduler, TheRendezvousNodeServesAtMostItsLimitOfProbersAtOnce) {
  const int nodes = 40;
  PairScheduler scheduler(nodes, PairSchedule::WithRendezvous, {.hub_pairs = 16});
  const auto started = drive(scheduler, nodes, 11, always_reached, 16);
  // The first batch is the hub's limit of probers, all of them at the hub.
  ASSERT_GE(started.size(), 16u);
  for (size_t k = 0; k < 16; ++k) {
    EXPECT_EQ(started[k].pair.dst, 0);
    EXPECT_EQ(started[k].at, started[0].at);
  }
  EXPECT_NE(started[16].at, started[0].at);
  std::set<Pair> seen;
  for (const auto& [d, at] : started) EXPECT_TRUE(seen.insert({d.src, d.dst}).second);
  EXPECT_EQ(seen.size(), size_t(2 * (nodes - 1)));
}

// A launch's check: node 0 probes each peer as soon as that peer's own probe of node 0 is in,
// all of them at once, never one after another (n-1 probes end to end on every launch).
TEST(PairScheduler, TheRendezvousNodeProbesEachPeerOnceItIsFreeAndAllOfThemAtOnce) {
  PairScheduler scheduler(4, PairSchedule::WithRendezvous, {.hub_pairs = 16});
  const Clock::time_point now{};
  const auto inbound = scheduler.next(now);
  ASSERT_EQ(inbound, (std::vector<PairDispatch>{{1, 0}, {2, 0}, {3, 0}}));
  scheduler.done(inbound[0], PairOutcome::Reached, now);
  EXPECT_EQ(scheduler.next(now), (std::vector<PairDispatch>{{0, 1}}));  // 2 and 3 still busy
  scheduler.done(inbound[1], PairOutcome::Reached, now);
  scheduler.done(inbound[2], PairOutcome::Reached, now);
  EXPECT_EQ(scheduler.next(now), (std::vector<PairDispatch>{{0, 2}, {0, 3}}));  // beside 0 -> 1
  EXPECT_FALSE(scheduler.finished());
}

TEST(PairScheduler, NothingToMeasureIsFinishedAtOnce) {
  for (int nodes : {0, 1}) {
    PairScheduler scheduler(nodes, PairSchedule::Every);
    EXPECT_TRUE(scheduler.finished());
    EXPECT_TRUE(scheduler.next(Clock::time_point{}).empty());
  }
}

TEST(ProbeStageTimeout, ResendsASynAndGrowsWithWhatWasMeasuredAndWithEachAttempt) {
  EXPECT_EQ(probe_stage_timeout(1, 0, 0), milliseconds(2000));
  EXPECT_EQ(probe_stage_timeout(1, 50'000, 0), milliseconds(2400));   // a 50 ms round trip seen
  EXPECT_EQ(probe_stage_timeout(1, 0, 1500), milliseconds(3500));     // commands start slowly here
  EXPECT_EQ(probe_stage_timeout(2, 0, 0), milliseconds(4000));
  EXPECT_EQ(probe_stage_timeout(3, 0, 0), milliseconds(8000));
  EXPECT_EQ(probe_stage_timeout(9, 1e9, 1e9), milliseconds(30000));   // bounded
}

}  // namespace
}  // namespace muster
