// The health checks' words between head and agent: the expectations an Ask carries, and the
// findings, counters and software facts the agent answers with. What a node says is bounded
// (counts and lengths) before the head keeps it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "topology/health/health.h"

namespace muster {

std::string health_request_json(const HealthExpectations& expect);
// The expectations of a health Ask; absent fields stay unset. Throws Error(Runtime) when the
// text is not a health request.
HealthExpectations expectations_from_request(std::string_view text);

std::string to_json(const NodeHealth& health);
// Throws Error(Runtime) when the text is not a node's health report.
NodeHealth node_health_from_json(std::string_view text);

std::string counters_to_json(const std::vector<HealthCounter>& counters);
std::vector<HealthCounter> counters_from_json(std::string_view text);

// Where this node's health checks read: MUSTER_HEALTH_FSROOT when set (a snapshot of a sick
// node, as HWLOC_FSROOT is for hwloc), else "/".
std::string health_root_of_this_node();

}  // namespace muster
