#include "probes/culprit_search.h"

#include <algorithm>
#include <map>
#include <set>

namespace muster {
namespace {

// What the search knows of one node.
struct NodeEvidence {
  std::set<int> partners;       // measured with
  std::set<int> slow_partners;  // slow with
  bool fast = false;            // fast with someone: not a slow node
  bool confirmed = false;       // slow with a partner chosen because it was known good
  int unanswered = 0;           // measurements with it that came back with nothing
  bool gave_up = false;         // a confirmation came back with nothing: not asked again
};

class Search {
 public:
  Search(int nodes, const MeasurePairs& measure, const CulpritSearchOptions& options)
      : n_(nodes), measure_(measure), options_(options), evidence_(size_t(std::max(nodes, 0))) {}

  CulpritReport run() {
    if (n_ < 2) return report_;
    measure_round(ring_pairs(0));
    if (n_ > 2) measure_round(ring_pairs(1));
    set_threshold();
    while (report_.rounds < options_.max_rounds) {
      auto pairs = confirmation_pairs();
      if (pairs.empty()) break;
      measure_round(pairs, /*confirming=*/true);
    }
    conclude();
    return report_;
  }

 private:
  // (0,1) (2,3) ... with offset 0; (1,2) (3,4) ... with offset 1, closing the ring with
  // (n-1, 0) where the count is even.
  std::vector<std::pair<int, int>> ring_pairs(int offset) const {
    std::vector<std::pair<int, int>> out;
    for (int a = offset; a + 1 < n_ + (offset && n_ % 2 == 0); a += 2) out.emplace_back(a, (a + 1) % n_);
    return out;
  }

  void measure_round(const std::vector<std::pair<int, int>>& pairs, bool confirming = false) {
    ++report_.rounds;
    const auto results = measure_(pairs);
    for (size_t k = 0; k < pairs.size(); ++k) {
      const auto [a, b] = pairs[k];
      if (k >= results.size() || !results[k]) {
        // Nothing to judge by: a node that fails its confirmation too is left unknown, not
        // asked round after round (each round waits out the stream's limit).
        for (int node : {a, b}) {
          NodeEvidence& e = evidence_[size_t(node)];
          ++e.unanswered;
          if (confirming && !e.fast) e.gave_up = true;
        }
        continue;
      }
      report_.measured.push_back({a, b, *results[k], report_.rounds});
      confirming_.push_back(confirming);
      if (report_.threshold_gbps > 0) record(report_.measured.back(), confirming);
    }
  }

  // The bar, from the ring's pairs: most of them are healthy while fewer than a quarter of
  // the nodes are slow (a slow node spoils its two ring pairs).
  void set_threshold() {
    std::vector<double> all;
    for (const auto& m : report_.measured) all.push_back(m.gbps);
    if (all.empty()) return;
    std::sort(all.begin(), all.end());
    report_.typical_gbps = all[all.size() / 2];
    report_.threshold_gbps = options_.min_gbps ? *options_.min_gbps
                             : n_ >= 3        ? options_.min_ratio * report_.typical_gbps
                                              : 0;
    if (report_.threshold_gbps <= 0) return;
    for (size_t k = 0; k < report_.measured.size(); ++k) record(report_.measured[k], confirming_[k]);
  }

  void record(const MeasuredPair& m, bool confirming) {
    const bool slow = m.gbps < report_.threshold_gbps;
    for (auto [self, other] : {std::pair(m.a, m.b), std::pair(m.b, m.a)}) {
      NodeEvidence& e = evidence_[size_t(self)];
      e.partners.insert(other);
      if (!slow) e.fast = true;
      if (slow) e.slow_partners.insert(other);
      if (slow && confirming) e.confirmed = true;
    }
  }

  // Slow with two partners or more, fast with none, and one of the slow partners known good
  // (or three of them): two slow links that meet at a node look like a slow node on two pairs.
  bool slow_node(int node) const {
    const NodeEvidence& e = evidence_[size_t(node)];
    return !e.fast && e.slow_partners.size() >= 2 && (e.confirmed || e.slow_partners.size() >= 3);
  }

  // A node that is neither known fast nor named slow, each with a partner known good that it
  // was not measured with yet; each node in at most one pair.
  std::vector<std::pair<int, int>> confirmation_pairs() const {
    if (report_.threshold_gbps <= 0) return {};
    std::vector<int> good;
    for (int i = 0; i < n_; ++i)
      if (evidence_[size_t(i)].fast) good.push_back(i);
    std::vector<bool> busy(static_cast<size_t>(n_));
    std::vector<std::pair<int, int>> out;
    size_t next_good = 0;
    for (int i = 0; i < n_; ++i) {
      const NodeEvidence& e = evidence_[size_t(i)];
      if (e.fast || slow_node(i) || busy[size_t(i)] || e.gave_up) continue;
      // Good partners taken in turn, so that the slow nodes of a round spread over them.
      for (size_t tried = 0; tried < good.size(); ++tried) {
        const int g = good[(next_good + tried) % good.size()];
        if (busy[size_t(g)] || e.partners.count(g)) continue;
        out.emplace_back(i, g);
        busy[size_t(g)] = busy[size_t(i)] = true;
        next_good = (next_good + tried + 1) % good.size();
        break;
      }
    }
    // A slow pair between two nodes fast with others is measured once more before it is
    // called a slow link: alone, or nearly, where the ring rounds had every node streaming
    // at once (on shared CPUs or uplinks one stream of many can look slow).
    for (auto [a, b] : links_to_measure_again())
      if (!busy[size_t(a)] && !busy[size_t(b)]) {
        out.emplace_back(a, b);
        busy[size_t(a)] = busy[size_t(b)] = true;
      }
    // With an odd count the ring's last pair (n-1, 0) fits no ring round: it is measured
    // once both its nodes are known fast and free, as the link a ring collective crosses there.
    const int last = n_ - 1;
    const NodeEvidence& closing = evidence_[size_t(last)];
    if (n_ % 2 == 1 && n_ > 2 && closing.fast && evidence_[0].fast && !closing.partners.count(0) &&
        !busy[0] && !busy[size_t(last)])
      out.emplace_back(last, 0);
    return out;
  }

  // Every measurement of each pair of nodes fast with others where one was slow: what a
  // slow link looks like, measured once or more.
  std::map<std::pair<int, int>, std::vector<double>> link_candidates() const {
    std::map<std::pair<int, int>, std::vector<double>> all;
    for (const auto& m : report_.measured) all[{std::min(m.a, m.b), std::max(m.a, m.b)}].push_back(m.gbps);
    std::map<std::pair<int, int>, std::vector<double>> out;
    for (auto& [ends, gbps] : all)
      if (evidence_[size_t(ends.first)].fast && evidence_[size_t(ends.second)].fast &&
          std::any_of(gbps.begin(), gbps.end(), [&](double g) { return g < report_.threshold_gbps; }))
        out.emplace(ends, std::move(gbps));
    return out;
  }

  std::vector<std::pair<int, int>> links_to_measure_again() const {
    std::vector<std::pair<int, int>> out;
    for (const auto& [ends, gbps] : link_candidates())
      if (gbps.size() == 1) out.push_back(ends);
    return out;
  }

  void conclude() {
    if (report_.threshold_gbps <= 0) return;
    for (int i = 0; i < n_; ++i) {
      const NodeEvidence& e = evidence_[size_t(i)];
      if (slow_node(i)) report_.slow_nodes.push_back(i);
      else if (!e.fast && (!e.slow_partners.empty() || e.unanswered > 0)) report_.unknown.push_back(i);
    }
    // A pair slow every time it was measured, twice or more, between two nodes that are fast
    // with others, is the link between them; slow once and not measured again, unknown.
    for (const auto& [ends, gbps] : link_candidates()) {
      const bool always_slow = std::all_of(gbps.begin(), gbps.end(), [&](double g) { return g < report_.threshold_gbps; });
      if (always_slow && gbps.size() >= 2) report_.slow_links.push_back(ends);
      else if (always_slow) report_.unknown_links.push_back(ends);
    }
  }

  const int n_;
  const MeasurePairs& measure_;
  const CulpritSearchOptions options_;
  std::vector<NodeEvidence> evidence_;
  std::vector<bool> confirming_;  // per measured pair: was it a confirmation
  CulpritReport report_;
};

}  // namespace

CulpritReport find_culprits(int nodes, const MeasurePairs& measure, const CulpritSearchOptions& options) {
  return Search(nodes, measure, options).run();
}

}  // namespace muster
