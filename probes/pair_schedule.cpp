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

// Only the rendezvous node is in several measurements at once, either way round: every pair of
// a launch's check has it at one end. Its pair with a node still waits for that node.
bool PairScheduler::is_hub(int node) const { return schedule_ == PairSchedule::WithRendezvous && node == 0; }

bool PairScheduler::free(int node) const {
  const int busy = probing_[size_t(node)] + targeted_[size_t(node)];
  return busy < (is_hub(node) ? limits_.hub_pairs : 1);
}

std::vector<PairDispatch> PairScheduler::next(Clock::time_point now) {
  std::vector<PairDispatch> out;
  // Over every pair, a measurement takes two free nodes: once fewer are left, the rest of the
  // queue (a million pairs at a thousand nodes) need not be walked.
  auto idle = [&](int node) { return probing_[size_t(node)] + targeted_[size_t(node)] == 0; };
  size_t free_nodes = 0;
  for (int node = 0; node < int(probing_.size()); ++node) free_nodes += idle(node);
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (schedule_ == PairSchedule::Every && free_nodes < 2) break;
    const PairDispatch& pair = it->pair;
    if (it->due <= now && free(pair.src) && free(pair.dst)) {
      free_nodes -= size_t(idle(pair.src)) + size_t(idle(pair.dst));
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
