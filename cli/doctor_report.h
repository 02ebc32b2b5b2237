// muster doctor's report rendered: the summary table, JSON per share/doctor.schema.json, and
// JUnit XML for CI.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "launcher/job/doctor.h"

namespace muster::cli {

nlohmann::json doctor_json(const DoctorReport& report);
std::string doctor_junit(const DoctorReport& report);
// Prometheus' text exposition format, for node_exporter's textfile collector: the overall
// status, when it ran (`unix_time`), how long each stage took, one gauge per check and node
// with its status (0 pass, 1 warn, 2 fail, 3 skip), and every value a check measured.
std::string doctor_prometheus(const DoctorReport& report, double unix_time);
// The final table, for a person: every failure and warning first, one row per node; then
// the passes and skips folded as `dshbak -c` folds, one row per stage, check and reason with
// its hosts' list ("10.88.0.[11-74]"), numbers that differ shown as their range. The other
// reports keep one entry per node and check. `colour` adds ANSI colours to the status column.
std::string doctor_summary(const DoctorReport& report, bool colour);

}  // namespace muster::cli
