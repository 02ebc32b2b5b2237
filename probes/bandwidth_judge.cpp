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
  // The fast nodes as the best node sees them, then typical from their pairs among themselves.
  const auto near_top = [&](size_t node) { return best[node] && *best[node] >= bar.min_ratio * top; };
  std::vector<double> among_fast;
  for (const auto& p : pairs)
    if (inside(p) && near_top(size_t(p.a)) && near_top(size_t(p.b))) among_fast.push_back(p.gbps);
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
