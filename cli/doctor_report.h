// muster doctor's findings: checks grouped by stage, and their renderings (summary table,
// JSON per share/doctor.schema.json, JUnit XML for CI).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace muster::cli {

enum class CheckStatus { Pass, Warn, Fail, Skip };

const char* status_name(CheckStatus s);  // "pass", "warn", "fail", "skip"

// One check of one stage, for the whole cluster or one node.
struct Check {
  std::string stage;
  std::string name;
  std::optional<std::string> node;
  CheckStatus status = CheckStatus::Pass;
  std::string reason;  // one line
};

struct StageResult {
  std::string name;
  CheckStatus status = CheckStatus::Pass;  // the worst of its checks, or Skip
  std::string reason;
  double seconds = 0;
};

struct DoctorReport {
  std::string cluster;       // the cluster's name or source
  std::vector<StageResult> stages;
  std::vector<Check> checks;
  double seconds = 0;
  // Fail if any check failed; Warn if any warned; else Pass.
  CheckStatus overall() const;
};

nlohmann::json doctor_json(const DoctorReport& report);
std::string doctor_junit(const DoctorReport& report);
// The final table; `colour` adds ANSI colours to the status column.
std::string doctor_summary(const DoctorReport& report, bool colour);

}  // namespace muster::cli
