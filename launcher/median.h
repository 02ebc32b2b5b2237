// The median as muster takes it everywhere (the cluster's link rates, the HTML report's
// colours, the GPU stress tests' bars): of an even count the lower of the two middle values,
// a figure that was measured rather than one between two. 0 for none.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace muster {

inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const auto middle = values.begin() + std::ptrdiff_t((values.size() - 1) / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

}  // namespace muster
