#include "probes/bandwidth_judge.h"

#include <algorithm>

namespace muster {

TypicalBandwidth judge_bandwidth(int nodes, const std::vector<PairFigure>& pairs, const BandwidthBar& bar) {
  TypicalBandwidth out;
  const size_t n = size_t(std::max(nodes, 0));
  out.fast.assign(n, false);
  const auto inside = [&](const PairFigure& p) {
    return p.a >= 0 && p.b >= 0 && size_t(p.a) < n && size_t(p.b) < n && p.a != p.b;
  };
  std::vector<std::optional<double>> best(n);
  for (const auto& p : pairs) {
    if (!inside(p)) continue;
    for (int node : {p.a, p.b}) best[size_t(node)] = std::max(best[size_t(node)].value_or(0), p.gbps);
  }
  double top = 0;
  for (const auto& b : best)
    if (b) {
      ++out.measured_nodes;
      top = std::max(top, *b);
    }
  if (out.measured_nodes == 0) return out;
  // Which nodes are fast is settled on the nodes' best figures: their median (the lower one)
  // over the nodes taken as fast, and fast is a best at or above min_ratio of it, from a
  // generous start (min_ratio squared of the best figure). Per node, because a slow node
  // spoils many pairs but is one node; generous and lower, because the best figure can be a
  // stream that ran alone while the others shared CPUs or uplinks with a round's other pairs
  // (twice as fast on a shared machine). Typical is then the median of the pairs among the
  // fast nodes.
  std::vector<bool> near(n);
  for (size_t i = 0; i < n; ++i) near[i] = best[i] && *best[i] >= bar.min_ratio * bar.min_ratio * top;
  for (int settle = 0; settle < 8; ++settle) {
    std::vector<double> bests;
    for (size_t i = 0; i < n; ++i)
      if (near[i]) bests.push_back(*best[i]);
    std::sort(bests.begin(), bests.end());
    const double reference = bests.empty() ? top : bests[(bests.size() - 1) / 2];
    std::vector<bool> next(n);
    for (size_t i = 0; i < n; ++i) next[i] = best[i] && *best[i] >= bar.min_ratio * reference;
    if (next == near) break;
    near = std::move(next);
  }
  std::vector<double> among_fast;
  for (const auto& p : pairs)
    if (inside(p) && near[size_t(p.a)] && near[size_t(p.b)]) among_fast.push_back(p.gbps);
  std::sort(among_fast.begin(), among_fast.end());
  out.typical_gbps = among_fast.empty() ? top : among_fast[(among_fast.size() - 1) / 2];
  if (bar.min_gbps) out.threshold_gbps = *bar.min_gbps;
  else if (out.measured_nodes >= 3) out.threshold_gbps = bar.min_ratio * out.typical_gbps;
  if (out.threshold_gbps <= 0) return out;
  for (size_t i = 0; i < n; ++i) {
    out.fast[i] = best[i] && *best[i] >= out.threshold_gbps;
    out.fast_nodes += out.fast[i];
    if (best[i] && !out.fast[i]) out.fastest_of_the_rest_gbps = std::max(out.fastest_of_the_rest_gbps, *best[i]);
  }
  // With the cluster file's figure the bar is absolute: any number of nodes can be below it.
  out.split = !bar.min_gbps && 2 * out.fast_nodes < out.measured_nodes;
  return out;
}

}  // namespace muster
