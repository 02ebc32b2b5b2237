// The lines a smoke rank prints for the head: "MUSTER-SMOKE {json}" on stdout.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "probes/smoke.h"

namespace muster {

inline constexpr std::string_view kSmokeLinePrefix = "MUSTER-SMOKE ";

nlohmann::json smoke_event_json(const SmokeEvent& e);
SmokeEvent smoke_event_from_json(const nlohmann::json& j);

// The JSON after the prefix, when `line` is a smoke line.
std::optional<nlohmann::json> parse_smoke_line(std::string_view line);

// The settings travel to the ranks in MUSTER_SMOKE (in the launch spec, over SSH), with
// the backend, the timeout and the secret of the job's rendezvous.
nlohmann::json smoke_settings_json(const SmokeSettings& s, const std::string& backend,
                                   long timeout_ms, const std::string& secret);
SmokeSettings smoke_settings_from_json(const nlohmann::json& j);

// What the pair search found, as rank 0 says it once the sweep is done ("type": "culprits").
nlohmann::json culprit_report_json(const CulpritReport& r);
// Read back by the head, for a plan of `nodes` nodes: a node number outside it, or more
// pairs than the search can measure, is an error (nlohmann::json::exception), as any
// malformed line is.
CulpritReport culprit_report_from_json(const nlohmann::json& j, int nodes);

}  // namespace muster
