#include "probes/culprit_search.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace muster {
namespace {

// What the search knows of one node.
struct NodeEvidence {
  std::set<int> partners;       // measured with
  std::set<int> quiet_partners;  // measured with after the crowded rounds
  std::set<int> slow_partners;  // slow with
  bool fast = false;            // fast with someone: not a slow node
  bool confirmed = false;       // slow with a partner chosen because it was known fast, and still is
};

// The ring's two rounds and the third stream (nearly) every node at once; later rounds only
// the nodes still in doubt.
constexpr int kCrowdedRounds = 3;

class Search {
 public:
  Search(int nodes, const MeasurePairs& measure, const CulpritSearchOptions& options)
      : n_(nodes), measure_(measure), options_(options), evidence_(size_t(std::max(nodes, 0))),
        unanswered_(size_t(std::max(nodes, 0))), gave_up_(size_t(std::max(nodes, 0))) {}

  CulpritReport run() {
    if (n_ < 2) return report_;
    measure_round(ring_pairs(0));
    if (n_ > 2) measure_round(ring_pairs(1));
    judge();
    confirm_nodes();
    measure_links_again();
    verify_slow_links();
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

  // Nodes not yet fast, each with a partner known fast, until none is left or max_rounds.
  // The bar settles after the first of these rounds that does not say "split" (below).
  void confirm_nodes() {
    for (bool first = true; report_.rounds < options_.max_rounds; first = false) {
      std::vector<bool> busy(static_cast<size_t>(n_));
      auto pairs = confirmation_pairs(busy);
      if (first) add_two_apart(pairs, busy);
      if (pairs.empty()) break;
      measure_round(pairs);
      judge();
      if (!settled_ && !judged_.split) settle_the_bar();
    }
    if (!settled_) settle_the_bar();
  }

  // The bar is set by the rounds in which nearly every node streamed at once (the ring's two
  // and the third), and later rounds are judged against it without moving it. Those later
  // rounds stream few pairs, and on shared CPUs or an oversubscribed fabric a pair alone runs
  // several times the pace of one among many (2.53 Gbit/s against a median of 0.33 among 32,
  // measured on 64 test hosts on 2 cores): let into the median, each few fast figures raised
  // the bar under pairs measured in the crowd, which then looked slow, were asked again, and
  // raised it further, until a healthy cluster ended with 24 links and 5 nodes "unknown".
  // While more than half the nodes look slow it is not settled: with every other node slow,
  // the rounds that follow tell which half is.
  void settle_the_bar() { settled_ = judged_; }

  // A slow pair between two nodes fast with others is measured once more before it is called
  // a slow link, in a round of its own: the rounds before had every node streaming at once,
  // and on shared CPUs or uplinks one stream of many can run a tenth of its pace (64 test
  // hosts on 2 cores did, on a healthy cluster). A slow link is as slow alone. Up to four
  // rounds, as links that share a node cannot stream at once, and a node can sit on three
  // (its two ring pairs and the third round's).
  void measure_links_again() {
    constexpr int kLinkRounds = 4;
    for (int round = 0; round < kLinkRounds; ++round) {
      std::vector<bool> busy(static_cast<size_t>(n_));
      std::vector<std::pair<int, int>> pairs;
      for (auto [a, b] : links_to_measure_again())
        if (!busy[size_t(a)] && !busy[size_t(b)]) {
          pairs.emplace_back(a, b);
          busy[size_t(a)] = busy[size_t(b)] = true;
        }
      if (pairs.empty()) break;
      measure_round(pairs);
      judge();
    }
  }

  // The links about to be named, measured once more beside pairs of healthy nodes as
  // controls: a load that slows a whole stretch of rounds (another job's burst on shared
  // CPUs; 64 test hosts on 2 cores beside a Slurm test in CI, where three healthy links were
  // slow in the crowd and again alone, at 0.48x of typical) slows the controls too, and the
  // round is judged by them; a slow link is slow beside healthy pairs. One round more, only
  // where a link would be named and there are nodes to spare for controls.
  void verify_slow_links() {
    std::vector<bool> busy(static_cast<size_t>(n_));
    std::vector<std::pair<int, int>> pairs;
    for (const auto& [ends, slow_each] : link_candidates())
      if (would_be_named(slow_each) && !busy[size_t(ends.first)] && !busy[size_t(ends.second)]) {
        pairs.push_back(ends);
        busy[size_t(ends.first)] = busy[size_t(ends.second)] = true;
      }
    if (pairs.empty()) return;
    const auto controls = control_pairs(busy, std::max<size_t>(pairs.size(), 2));
    if (controls.empty()) return;
    pairs.insert(pairs.end(), controls.begin(), controls.end());
    measure_round(pairs);
    bar_by_controls(controls);
    judge();
  }

  // Up to `wanted` pairs of nodes known fast and idle this round.
  std::vector<std::pair<int, int>> control_pairs(std::vector<bool>& busy, size_t wanted) const {
    std::vector<int> idle;
    for (int i = 0; i < n_; ++i)
      if (!busy[size_t(i)] && evidence_[size_t(i)].fast) idle.push_back(i);
    std::vector<std::pair<int, int>> out;
    for (size_t k = 0; k + 1 < idle.size() && out.size() < wanted; k += 2) {
      out.emplace_back(idle[k], idle[k + 1]);
      busy[size_t(idle[k])] = busy[size_t(idle[k + 1])] = true;
    }
    return out;
  }

  // The bar of the round just measured, where the controls say it ran slower as a whole:
  // min_ratio of their median (never above the settled bar). The cluster file's figure is a
  // bar no load excuses.
  void bar_by_controls(const std::vector<std::pair<int, int>>& controls) {
    if (options_.bar.min_gbps) return;
    std::vector<double> gbps;
    for (const auto& m : report_.measured)
      if (m.round == report_.rounds && std::find(controls.begin(), controls.end(), std::pair(m.a, m.b)) != controls.end())
        gbps.push_back(m.gbps);
    if (gbps.empty()) return;
    std::sort(gbps.begin(), gbps.end());
    round_bar_[report_.rounds] = options_.bar.min_ratio * gbps[(gbps.size() - 1) / 2];
  }

  // Whether a measurement is below the bar of its round.
  bool slow(const MeasuredPair& m) const {
    const auto round = round_bar_.find(m.round);
    const double bar = round == round_bar_.end() ? report_.threshold_gbps
                                                 : std::min(report_.threshold_gbps, round->second);
    return m.gbps < bar;
  }

  void measure_round(const std::vector<std::pair<int, int>>& pairs) {
    ++report_.rounds;
    const auto results = measure_(pairs);
    for (size_t k = 0; k < pairs.size(); ++k) {
      const auto [a, b] = pairs[k];
      const bool confirmation = confirmations_.count({a, b}) > 0;
      if (k >= results.size() || !results[k]) {
        // Nothing to judge by: a node that fails its confirmation too is left unknown, not
        // asked round after round (each round waits out the stream's limit).
        for (int node : {a, b}) {
          ++unanswered_[size_t(node)];
          if (confirmation) gave_up_[size_t(node)] = true;
        }
        continue;
      }
      report_.measured.push_back({a, b, *results[k], report_.rounds});
      confirming_.push_back(confirmation);
    }
  }

  // The bar and the fast nodes from everything measured so far (judge_bandwidth), and each
  // node's evidence afresh: a round can show the first guess of "fast" wrong (every other node
  // slow on the ring looks like a healthy cluster until nodes two apart are measured).
  void judge() {
    std::vector<PairFigure> figures;
    for (const auto& m : report_.measured) figures.push_back({m.a, m.b, m.gbps});
    if (settled_) {
      // Fast and slow by the settled bar, as if the cluster file had given it.
      BandwidthBar bar = options_.bar;
      if (settled_->threshold_gbps > 0) bar.min_gbps = settled_->threshold_gbps;
      judged_ = judge_bandwidth(n_, figures, bar);
      judged_.typical_gbps = settled_->typical_gbps;
      judged_.threshold_gbps = settled_->threshold_gbps;
      judged_.split = settled_->split;
    } else {
      judged_ = judge_bandwidth(n_, figures, options_.bar);
    }
    report_.typical_gbps = judged_.typical_gbps;
    report_.threshold_gbps = judged_.threshold_gbps;
    evidence_.assign(size_t(n_), NodeEvidence{});
    if (report_.threshold_gbps <= 0) return;
    for (size_t k = 0; k < report_.measured.size(); ++k) {
      const MeasuredPair& m = report_.measured[k];
      const bool slow = this->slow(m);
      for (auto [self, other] : {std::pair(m.a, m.b), std::pair(m.b, m.a)}) {
        NodeEvidence& e = evidence_[size_t(self)];
        e.partners.insert(other);
        if (m.round > kCrowdedRounds) e.quiet_partners.insert(other);
        if (!slow) e.fast = true;
        if (slow) e.slow_partners.insert(other);
        // A confirmation counts from the fourth round, when only the nodes still in doubt
        // stream: a slow node is as slow with few pairs streaming, and a healthy node slowed by
        // the crowd of the first three rounds is not (one in a few hundred was, three times
        // running, on 64 simulated nodes whose crowded streams sometimes ran at a third of
        // their pace, and was named slow).
        if (slow && confirming_[k] && m.round > kCrowdedRounds && judged_.fast[size_t(other)]) e.confirmed = true;
      }
    }
  }

  // Slow with two partners or more, fast with none, and slow with a partner chosen because it
  // was known fast: two slow links that meet at a node look like a slow node on two pairs, and
  // a healthy node among slow ones is slow with all of them. Named only where the bar is
  // trusted (no split).
  bool slow_node(int node) const { return !judged_.split && slow_by_evidence(node); }

  bool slow_by_evidence(int node) const {
    const NodeEvidence& e = evidence_[size_t(node)];
    // Every node below the cluster file's figure: the figure judges each, none is a partner
    // to compare with.
    if (judged_.fast_nodes == 0) return e.slow_partners.size() >= 2;
    // Slow with every other node is not enough while all of it was in the crowd: on four
    // nodes the first three rounds pair each node with all three others, and a healthy node
    // whose streams were crowded out three times (a busy 2-core machine did it) was named. A
    // fourth round asks it again, beside the nodes in doubt alone.
    return !e.fast && e.slow_partners.size() >= 2 && e.confirmed;
  }

  // A node that is neither known fast nor named slow, each with a partner known good that it
  // was not measured with yet; each node in at most one pair.
  std::vector<std::pair<int, int>> confirmation_pairs(std::vector<bool>& busy) {
    if (report_.threshold_gbps <= 0) return {};
    std::vector<int> good;
    for (int i = 0; i < n_; ++i)
      if (evidence_[size_t(i)].fast) good.push_back(i);
    std::vector<std::pair<int, int>> out;
    size_t next_good = 0;
    // Nodes with no evidence against them first (a healthy node whose ring partners were both
    // slow), so that they are not starved of fast partners by the slow nodes beside them.
    std::vector<int> waiting;
    for (int i = 0; i < n_; ++i) {
      const NodeEvidence& e = evidence_[size_t(i)];
      if (!e.fast && !slow_by_evidence(i) && !busy[size_t(i)] && !gave_up_[size_t(i)]) waiting.push_back(i);
    }
    std::stable_partition(waiting.begin(), waiting.end(), [&](int i) { return !evidence_[size_t(i)].confirmed; });
    for (int i : waiting) {
      const NodeEvidence& e = evidence_[size_t(i)];
      // Good partners taken in turn, so that the slow nodes of a round spread over them; one
      // not measured with yet, else one measured with only in the crowd (two good nodes of
      // six have no other to offer).
      for (const std::set<int>* measured_with : {&e.partners, &e.quiet_partners}) {
        if (busy[size_t(i)]) break;
        for (size_t tried = 0; tried < good.size(); ++tried) {
          const int g = good[(next_good + tried) % good.size()];
          if (busy[size_t(g)] || measured_with->count(g)) continue;
          out.emplace_back(i, g);
          confirmations_.insert({i, g});
          busy[size_t(g)] = busy[size_t(i)] = true;
          next_good = (next_good + tried + 1) % good.size();
          break;
        }
      }
    }
    // With an odd count the ring's last pair (n-1, 0) fits no ring round: it is measured
    // once both its nodes are known fast and free, as the link a ring collective crosses there.
    const int last = n_ - 1;
    const NodeEvidence& closing = evidence_[size_t(last)];
    if (n_ % 2 == 1 && n_ > 2 && closing.fast && evidence_[0].fast && !closing.partners.count(0) &&
        !busy[0] && !busy[size_t(last)]) {
      out.emplace_back(last, 0);
      busy[0] = busy[size_t(last)] = true;
    }
    return out;
  }

  // Nodes two apart on the ring, (0,2) (1,3) (4,6) (5,7) ..., among those idle this round and
  // not measured together yet.
  void add_two_apart(std::vector<std::pair<int, int>>& out, std::vector<bool>& busy) const {
    for (int a = 0; a + 2 < n_; ++a) {
      const int b = a + 2;
      if (a % 4 >= 2 || busy[size_t(a)] || busy[size_t(b)] || evidence_[size_t(a)].partners.count(b)) continue;
      out.emplace_back(a, b);
      busy[size_t(a)] = busy[size_t(b)] = true;
    }
  }

  // Every measurement of each pair of nodes fast with others where one was slow, each as
  // whether it was below its round's bar: what a slow link looks like, measured once or more.
  std::map<std::pair<int, int>, std::vector<bool>> link_candidates() const {
    std::map<std::pair<int, int>, std::vector<bool>> all;
    for (const auto& m : report_.measured) all[{std::min(m.a, m.b), std::max(m.a, m.b)}].push_back(slow(m));
    std::map<std::pair<int, int>, std::vector<bool>> out;
    for (auto& [ends, slow_each] : all)
      if (evidence_[size_t(ends.first)].fast && evidence_[size_t(ends.second)].fast &&
          std::find(slow_each.begin(), slow_each.end(), true) != slow_each.end())
        out.emplace(ends, std::move(slow_each));
    return out;
  }

  // A link's measurements (each: below its round's bar) that were never fast.
  static bool slow_every_time(const std::vector<bool>& slow_each) {
    return std::find(slow_each.begin(), slow_each.end(), false) == slow_each.end();
  }
  // A link slow every time, measured twice or more: one that conclude() names.
  static bool would_be_named(const std::vector<bool>& slow_each) {
    return slow_each.size() >= 2 && slow_every_time(slow_each);
  }

  std::vector<std::pair<int, int>> links_to_measure_again() const {
    std::vector<std::pair<int, int>> out;
    for (const auto& [ends, slow_each] : link_candidates())
      if (slow_each.size() == 1) out.push_back(ends);
    return out;
  }

  void conclude() {
    if (report_.threshold_gbps <= 0) return;
    report_.split = judged_.split;
    for (int i = 0; i < n_; ++i) {
      const NodeEvidence& e = evidence_[size_t(i)];
      if (e.fast) ++report_.cleared;
      else if (judged_.split && !e.partners.empty()) report_.below_the_fast.push_back(i);
      else if (slow_node(i)) report_.slow_nodes.push_back(i);
      else if (!e.slow_partners.empty() || unanswered_[size_t(i)] > 0) report_.unknown.push_back(i);
    }
    if (judged_.split) return;
    // A pair slow every time it was measured, twice or more, between two nodes that are fast
    // with others, is the link between them; slow once and not measured again, unknown.
    for (const auto& [ends, slow_each] : link_candidates()) {
      if (would_be_named(slow_each)) report_.slow_links.push_back(ends);
      else if (slow_every_time(slow_each)) report_.unknown_links.push_back(ends);
    }
  }

  const int n_;
  const MeasurePairs& measure_;
  const CulpritSearchOptions options_;
  std::vector<NodeEvidence> evidence_;          // rebuilt by judge()
  std::vector<int> unanswered_;                 // per node: measurements that came back empty
  std::vector<bool> gave_up_;                   // per node: a confirmation came back empty
  std::set<std::pair<int, int>> confirmations_;  // pairs chosen because the partner was fast
  std::vector<bool> confirming_;                // per measured pair: was it a confirmation
  TypicalBandwidth judged_;
  std::optional<TypicalBandwidth> settled_;     // the bar once settled (settle_the_bar)
  std::map<int, double> round_bar_;             // by round: a lower bar its controls set
  CulpritReport report_;
};

}  // namespace

CulpritReport find_culprits(int nodes, const MeasurePairs& measure, const CulpritSearchOptions& options) {
  return Search(nodes, measure, options).run();
}

}  // namespace muster
