// The report flags doctor and health share (--json [FILE], --junit [FILE], --prometheus FILE,
// --html FILE, --strict), and delivering a report as they ask: files written atomically, at
// most one report on standard output, the table beside it, and the exit status. ping and
// smoke take --html FILE too.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "launcher/job/doctor.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace muster::cli {

struct ReportFlags {
  std::string command;  // whose report it is: "doctor", "health"
  bool strict = false;
  std::string json_file, junit_file, prometheus_file, html_file;
  CLI::Option* json = nullptr;  // whether --json and --junit were given, with or without a file
  CLI::Option* junit = nullptr;
};

void add_report_flags(CLI::App& app, ReportFlags& flags);

// --html FILE: the report as one self-contained HTML page (cli/html/html_report.h).
void add_html_flag(CLI::App& app, std::string& file);
// Writes `report` (as --json prints it) to `file` as `command`'s HTML page, atomically.
void write_html_report(const std::string& file, const nlohmann::json& report, const std::string& command);

// Throws Error(Usage) when --json and --junit would both print to standard output.
void check_report_flags(const ReportFlags& flags);

// Writes and prints `report` as the flags ask; returns the exit status (0 pass, 1 a check
// failed or, with --strict, warned; 2 for a configuration error).
int deliver_report(const DoctorReport& report, const ReportFlags& flags);

}  // namespace muster::cli
