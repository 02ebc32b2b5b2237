// The findings of one health check in a node's result, for tests that look at one check.
#pragma once

#include <string>
#include <vector>

#include "topology/health/health.h"

namespace muster::testing {

inline std::vector<HealthFinding> of(const NodeHealth& h, const std::string& check) {
  std::vector<HealthFinding> out;
  for (const auto& f : h.findings)
    if (f.check == check) out.push_back(f);
  return out;
}

}  // namespace muster::testing
