#include "probes/pair_schedule.h"

#include <algorithm>

namespace muster {

PairScheduler::PairScheduler(int nodes, PairSchedule schedule, Limits limits)
    : schedule_(schedule), limits_(limits), probing_(size_t(std::max(nodes, 0))),
      targeted_(size_t(std::max(nodes, 0))) {
  const auto rounds = schedule == PairSchedule::Every ? tournament_rounds(nodes) : rendezvous_rounds(nodes);
  for (const auto& round : rounds)
    for (auto [src, dst] : round) queue_.push_back({{src, dst, 1, false}, {}});
  pairs_ = queue_.size();
}

bool PairScheduler::free_as_prober(int node) const {
  return probing_[size_t(node)] == 0 && targeted_[size_t(node)] == 0;
}

bool PairScheduler::free_as_target(int node) const {
  if (probing_[size_t(node)] != 0) return false;
  // Only the rendezvous node serves several probers at once: with n-1 pairs all ending at
  // it, one at a time would make a launch's check take n-1 measurements end to end.
  const int most = schedule_ == PairSchedule::WithRendezvous && node == 0 ? limits_.hub_targets : 1;
  return targeted_[size_t(node)] < most;
}

std::vector<PairDispatch> PairScheduler::next(Clock::time_point now) {
  std::vector<PairDispatch> out;
  // Over every pair, a measurement takes two free nodes: once fewer are left, the rest of the
  // queue (a million pairs at a thousand nodes) need not be walked.
  size_t free_nodes = 0;
  for (size_t node = 0; node < probing_.size(); ++node)
    free_nodes += probing_[node] == 0 && targeted_[node] == 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (schedule_ == PairSchedule::Every && free_nodes < 2) break;
    const PairDispatch& pair = it->pair;
    if (it->due <= now && free_as_prober(pair.src) && free_as_target(pair.dst)) {
      free_nodes -= (targeted_[size_t(pair.dst)] == 0) + 1;  // the prober was free
      ++probing_[size_t(pair.src)];
      ++targeted_[size_t(pair.dst)];
      ++in_flight_;
      out.push_back(pair);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

bool PairScheduler::done(const PairDispatch& pair, PairOutcome outcome, Clock::time_point now) {
  --probing_[size_t(pair.src)];
  --targeted_[size_t(pair.dst)];
  --in_flight_;
  const bool starved = pair.starved_before || outcome == PairOutcome::Starved;
  const int attempts = starved ? limits_.attempts_starved : limits_.attempts;
  const bool retry = outcome == PairOutcome::Failed || outcome == PairOutcome::Starved;
  if (retry && pair.attempt < attempts) {
    // To the back, and not before it is due: a retry never repeats the moment the failure
    // came from, and the pairs queued before it go first.
    queue_.push_back({{pair.src, pair.dst, pair.attempt + 1, starved}, now + limits_.retry_after});
    return false;
  }
  return true;
}

std::chrono::milliseconds probe_stage_timeout(int attempt, double slowest_rtt_us, double command_rtt_ms) {
  constexpr double kOneSynResent = 2000, kMost = 30000;  // ms
  double base = kOneSynResent + 8 * std::max(slowest_rtt_us, 0.0) / 1000 + std::max(command_rtt_ms, 0.0);
  base *= double(1 << std::clamp(attempt - 1, 0, 4));
  return std::chrono::milliseconds(int64_t(std::min(base, kMost)));
}

}  // namespace muster
