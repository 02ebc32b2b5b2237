// The report flags doctor and health share (--json [FILE], --junit [FILE], --prometheus FILE,
// --strict), and delivering a report as they ask: files written atomically, at most one
// report on standard output, the table beside it, and the exit status.
#pragma once

#include <string>

#include "launcher/job/doctor.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace muster::cli {

struct ReportFlags {
  bool strict = false;
  std::string json_file, junit_file, prometheus_file;
  CLI::Option* json = nullptr;  // whether --json and --junit were given, with or without a file
  CLI::Option* junit = nullptr;
};

void add_report_flags(CLI::App& app, ReportFlags& flags);

// Throws Error(Usage) when --json and --junit would both print to standard output.
void check_report_flags(const ReportFlags& flags);

// Writes and prints `report` as the flags ask; returns the exit status (0 pass, 1 a check
// failed or, with --strict, warned; 2 for a configuration error).
int deliver_report(const DoctorReport& report, const ReportFlags& flags);

}  // namespace muster::cli
