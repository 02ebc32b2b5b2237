// What ping measured, as JSON: muster ping --json prints it, and doctor's report carries the
// network stage's under "network", for reports that draw the pairs (the HTML page).
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "launcher/job/cluster_ping.h"
#include "probes/culprit_search.h"

namespace muster::cli {

// Every node, pair (RTT, bandwidth), problem and choice of `report`, with host names; the
// pair search's rounds under "search" where it ran (null where it did not).
nlohmann::json ping_json(const PingReport& report, const std::optional<CulpritReport>& search);

}  // namespace muster::cli
