// muster doctor's report rendered: the summary table, JSON per share/doctor.schema.json, and
// JUnit XML for CI.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "launcher/job/doctor.h"

namespace muster::cli {

nlohmann::json doctor_json(const DoctorReport& report);
std::string doctor_junit(const DoctorReport& report);
// The final table; `colour` adds ANSI colours to the status column.
std::string doctor_summary(const DoctorReport& report, bool colour);

}  // namespace muster::cli
