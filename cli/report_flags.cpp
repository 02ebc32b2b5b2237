#include "cli/report_flags.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/doctor_report.h"
#include "cli/flag_checks.h"
#include "cli/html/html_report.h"
#include "cli/terminal_output.h"
#include "launcher/error.h"
#include "launcher/replace_file.h"
#include "launcher/text_bytes.h"

namespace muster::cli {
namespace {

// A report for its readers too, as umask allows (replace_file's temporary is this user's alone).
void write_file(const std::string& path, const std::string& text) {
  if (const int error = replace_file(path, text, {.mode = 0666, .honour_umask = true}))
    throw Error(ErrorKind::Runtime, fmt::format("cannot write {}: {}", path, std::strerror(error)));
}

// --json and --junit take a FILE, or print the report when given alone or as -, as the
// other commands' --json does.
CLI::Option* add_report_flag(CLI::App& app, const std::string& flag, std::string& file,
                             const std::string& what, const std::string& example) {
  return app.add_option(flag, file, what + " to FILE, or print it when given alone or as -")
      ->expected(0, 1)
      ->type_name("[FILE]")
      ->check(file_not_option(example, true));
}

// Where --json or --junit sends its report: a file, or standard output when given alone or
// as -, as the other commands' --json does.
enum class ReportTo { Nowhere, File, StandardOutput };

ReportTo report_to(const CLI::Option* flag, const std::string& file) {
  if (flag->count() == 0) return ReportTo::Nowhere;
  return file.empty() || file == "-" ? ReportTo::StandardOutput : ReportTo::File;
}

}  // namespace

void add_report_flags(CLI::App& app, ReportFlags& flags) {
  app.add_flag("--strict", flags.strict, "warnings fail too (exit 1)");
  flags.json = add_report_flag(app, "--json", flags.json_file,
                               "write the report as JSON (schema: share/muster/doctor.schema.json)", "report.json");
  flags.junit = add_report_flag(app, "--junit", flags.junit_file,
                                "write JUnit XML, one testcase per check and node,", "report.xml");
  app.add_option("--prometheus", flags.prometheus_file,
                 "write the results in Prometheus' text format, atomically, for node_exporter's "
                 "textfile collector (e.g. /var/lib/prometheus/node-exporter/muster.prom)")
      ->type_name("FILE")
      ->check(file_not_option("muster.prom", false));
  add_html_flag(app, flags.html_file);
}

void add_html_flag(CLI::App& app, std::string& file) {
  app.add_option("--html", file,
                 "write the report as one self-contained HTML page (heatmaps, the verdict first; "
                 "nothing fetched), e.g. for a CI artifact")
      ->type_name("FILE")
      ->check(file_not_option("report.html", false));
}

void write_html_report(const std::string& file, const nlohmann::json& report, const std::string& command) {
  write_file(file, html_report(report, command));
}

void check_report_flags(const ReportFlags& flags) {
  if (report_to(flags.json, flags.json_file) == ReportTo::StandardOutput &&
      report_to(flags.junit, flags.junit_file) == ReportTo::StandardOutput)
    throw Error(ErrorKind::Usage, "--json and --junit cannot both print to standard output; "
                                  "give one of them a file (--junit report.xml)");
}

int deliver_report(const DoctorReport& report, const ReportFlags& flags) {
  const ReportTo json_to = report_to(flags.json, flags.json_file);
  const ReportTo junit_to = report_to(flags.junit, flags.junit_file);
  std::string printed_report;  // the one report for standard output, if any
  auto deliver = [&](ReportTo to, const std::string& file, const std::string& text) {
    if (to == ReportTo::File) write_file(file, text);
    if (to == ReportTo::StandardOutput) printed_report = text;
  };
  if (json_to != ReportTo::Nowhere) deliver(json_to, flags.json_file, report_json_text(doctor_json(report), 2) + "\n");
  if (junit_to != ReportTo::Nowhere) deliver(junit_to, flags.junit_file, doctor_junit(report));
  if (!flags.prometheus_file.empty())
    write_file(flags.prometheus_file, doctor_prometheus(report, double(std::time(nullptr))));
  if (!flags.html_file.empty()) write_html_report(flags.html_file, doctor_json(report), flags.command);
  // A report on standard output is for a program: the table goes to stderr, beside the
  // progress, where a person still sees it.
  const bool table_on_stderr = !printed_report.empty();
  const char* no_colour = std::getenv("NO_COLOR");
  const bool colour = isatty(table_on_stderr ? STDERR_FILENO : STDOUT_FILENO) && !(no_colour && *no_colour);
  if (table_on_stderr) {
    print_note_raw(doctor_summary(report, colour));
    print_out(printed_report);
  } else {
    print_out(doctor_summary(report, colour));
  }
  if (report.config_error) return kUsageExit;
  CheckStatus overall = report.overall();
  return overall == CheckStatus::Fail || (flags.strict && overall == CheckStatus::Warn) ? 1 : 0;
}

}  // namespace muster::cli
