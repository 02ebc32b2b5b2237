#include "cli/doctor_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "cli/network_json.h"
#include "cli/terminal_output.h"
#include "launcher/text_bytes.h"

namespace muster::cli {

nlohmann::json doctor_json(const DoctorReport& report) {
  nlohmann::json stages = nlohmann::json::array(), checks = nlohmann::json::array();
  for (const auto& s : report.stages)
    stages.push_back({{"name", s.name}, {"status", status_name(s.status)}, {"reason", s.reason},
                      {"duration_s", s.seconds}});
  std::map<std::string, int> counts = {{"pass", 0}, {"warn", 0}, {"fail", 0}, {"skip", 0}};
  for (const auto& c : report.checks) {
    checks.push_back({{"stage", c.stage}, {"name", c.name},
                      {"node", c.node ? nlohmann::json(*c.node) : nlohmann::json(nullptr)},
                      {"status", status_name(c.status)}, {"reason", c.reason}});
    if (!c.values.empty()) checks.back()["values"] = c.values;
    if (c.health)
      checks.back()["finding"] = {{"status", health_status_name(c.health->status)},
                                  {"device", c.health->device},
                                  {"observed", c.health->observed},
                                  {"expected", c.health->expected},
                                  {"expected_from", c.health->expected_from},
                                  {"remedy", c.health->remedy}};
    ++counts[status_name(c.status)];
  }
  nlohmann::json out = {{"schema", "muster-doctor/1"}, {"muster_version", MUSTER_VERSION},
                        {"cluster", report.cluster}, {"status", status_name(report.overall())},
                        {"duration_s", report.seconds}, {"stages", stages}, {"checks", checks},
                        {"summary", counts}};
  if (report.network) out["network"] = ping_json(*report.network, report.pair_search);
  if (!report.node_types.empty()) {
    out["topology"] = nlohmann::json::array();
    for (const auto& type : report.node_types)
      out["topology"].push_back({{"hosts", type.hosts}, {"gpu_models", type.gpu_models},
                                 {"devices", type.paths.devices}, {"rows", type.paths.rows},
                                 {"nearest_nics", type.paths.nearest}});
  }
  return out;
}

namespace {
// Text for an attribute or element: what XML cannot hold replaced (report_text), counted in
// `replaced`, and the rest escaped.
std::string xml_escape(const std::string& text, size_t& replaced) {
  ReportText clean = report_text(text, ReportMarkup::Xml);
  replaced += clean.replaced;
  std::string out;
  for (char c : clean.text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}
}  // namespace

std::string doctor_junit(const DoctorReport& report) {
  auto count = [&](const std::string& stage, CheckStatus s) {
    return std::count_if(report.checks.begin(), report.checks.end(), [&](const Check& c) {
      return (stage.empty() || c.stage == stage) && c.status == s;
    });
  };
  size_t replaced = 0;
  auto xml = [&](const std::string& text) { return xml_escape(text, replaced); };
  std::string out;
  out += fmt::format("<testsuites name=\"muster doctor\" tests=\"{}\" failures=\"{}\" errors=\"0\" "
                     "skipped=\"{}\" time=\"{:.3f}\">\n", report.checks.size(),
                     count("", CheckStatus::Fail), count("", CheckStatus::Skip), report.seconds);
  for (const auto& stage : report.stages) {
    auto tests = std::count_if(report.checks.begin(), report.checks.end(),
                               [&](const Check& c) { return c.stage == stage.name; });
    out += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" "
                       "skipped=\"{}\" time=\"{:.3f}\">\n", xml(stage.name), tests,
                       count(stage.name, CheckStatus::Fail), count(stage.name, CheckStatus::Skip),
                       stage.seconds);
    for (const auto& c : report.checks) {
      if (c.stage != stage.name) continue;
      std::string name = c.node ? fmt::format("{} [{}]", c.name, *c.node) : c.name;
      // A node's health findings are one per device: the device keeps their names apart.
      if (c.health && !c.health->device.empty()) name += " " + c.health->device;
      out += fmt::format("    <testcase classname=\"muster.{}\" name=\"{}\">", xml(c.stage),
                         xml(name));
      switch (c.status) {
        case CheckStatus::Pass: break;
        case CheckStatus::Fail:
          out += fmt::format("<failure message=\"{0}\">{0}</failure>", xml(c.reason));
          break;
        case CheckStatus::Skip:
          out += fmt::format("<skipped message=\"{}\"/>", xml(c.reason));
          break;
        case CheckStatus::Warn:
          out += fmt::format("<system-out>warning: {}</system-out>", xml(c.reason));
          break;
      }
      out += "</testcase>\n";
    }
    out += "  </testsuite>\n";
  }
  out += "</testsuites>\n";
  const std::string said =
      replaced == 0 ? ""
                    : fmt::format("<!-- {} byte{} that XML cannot hold (not UTF-8, or a control "
                                  "character) replaced with U+FFFD -->\n", replaced, replaced == 1 ? "" : "s");
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + said + out;
}

namespace {

// A label value as the exposition format wants it: backslash, double quote and newline
// escaped; nothing else is special.
std::string label_escape(const std::string& text) {
  std::string out;
  for (char c : report_text(text, ReportMarkup::Json).text) {  // the exposition format is UTF-8
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// A metric name from a value's key: [a-zA-Z_:][a-zA-Z0-9_:]*.
std::string metric_name(const std::string& key) {
  std::string out = "muster_doctor_";
  for (char c : key) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

int status_value(CheckStatus s) {
  switch (s) {
    case CheckStatus::Pass: return 0;
    case CheckStatus::Warn: return 1;
    case CheckStatus::Fail: return 2;
    case CheckStatus::Skip: return 3;
  }
  return 2;
}

// The samples of one metric family, each series once (the format forbids repeats).
struct Family {
  std::string help;
  std::map<std::string, double> samples;  // labels -> value
};

}  // namespace

std::string doctor_prometheus(const DoctorReport& report, double unix_time) {
  const std::string cluster = fmt::format("cluster=\"{}\"", label_escape(report.cluster));
  std::map<std::string, Family> families;
  auto set = [&](const std::string& name, const std::string& help, const std::string& labels,
                 double value) {
    Family& f = families[name];
    f.help = help;
    f.samples.emplace(labels, value);
  };
  set("muster_doctor_status", "The whole run: 0 pass, 1 warn, 2 fail.", cluster,
      status_value(report.overall()));
  set("muster_doctor_last_run_timestamp_seconds", "When the run ended, in seconds since the epoch.",
      cluster, unix_time);
  set("muster_doctor_duration_seconds", "How long the whole run took.", cluster, report.seconds);
  for (const auto& s : report.stages)
    set("muster_doctor_stage_duration_seconds", "How long each stage took.",
        fmt::format("{},stage=\"{}\"", cluster, label_escape(s.name)), s.seconds);
  for (const auto& c : report.checks) {
    const std::string labels = fmt::format("{},stage=\"{}\",check=\"{}\",node=\"{}\"", cluster,
                                           label_escape(c.stage), label_escape(c.name),
                                           label_escape(c.node.value_or("")));
    set("muster_doctor_check_status",
        "Each check of each node (node=\"\" for the cluster): 0 pass, 1 warn, 2 fail, 3 skip.",
        labels, status_value(c.status));
    // A check made twice for one node (two problems of one kind) keeps its worst status.
    double& kept = families["muster_doctor_check_status"].samples[labels];
    kept = std::max(kept, double(status_value(c.status)));
    // A health finding is about one device: its series carry the device, so that a degraded
    // link and a healthy one of the same node are two series, not one.
    const std::string series = c.health && !c.health->device.empty()
                                   ? fmt::format("{},device=\"{}\"", labels, label_escape(c.health->device))
                                   : labels;
    if (c.health && !c.health->device.empty()) {
      set("muster_doctor_device_status",
          "Each health finding of each device: 0 pass, 1 warn (or unknown), 2 fail, 3 skip.", series,
          status_value(c.status));
      double& worst = families["muster_doctor_device_status"].samples[series];
      worst = std::max(worst, double(status_value(c.status)));
    }
    for (const auto& [key, value] : c.values)
      if (std::isfinite(value))
        set(metric_name(key), fmt::format("What doctor's {} check measured ({}).", c.name, key),
            series, value);
  }
  std::string out;
  for (const auto& [name, f] : families) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, f.help, name);
    for (const auto& [labels, value] : f.samples) out += fmt::format("{}{{{}}} {}\n", name, labels, value);
  }
  return out;
}

std::string doctor_summary(const DoctorReport& report, bool colour) {
  auto paint = [&](CheckStatus s) {
    std::string word = status_name(s);
    for (auto& ch : word) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    if (!colour) return word;
    const char* code = s == CheckStatus::Pass ? "32" : s == CheckStatus::Warn ? "33"
                       : s == CheckStatus::Fail ? "31" : "2";
    return fmt::format("\033[{}m{}\033[0m", code, word);
  };
  size_t stage_w = 8, name_w = 5, node_w = 4;
  for (const auto& c : report.checks) {
    stage_w = std::max(stage_w, c.stage.size());
    name_w = std::max(name_w, c.name.size());
    node_w = std::max(node_w, c.node.value_or("-").size());
  }
  std::string out = fmt::format("\n{:<{}}  {:<{}}  {:<{}}  {:<6}  {}\n", "STAGE", stage_w, "CHECK",
                                name_w, "NODE", node_w, "STATUS", "REASON");
  // REASON is wrapped under itself to fit 80 columns (--json keeps each on one line), with
  // room for 30 columns of it however wide the node names make the columns before.
  const size_t reason_at = stage_w + name_w + node_w + 6 + 4 * 2;
  const size_t width = std::max(kColumns, reason_at + 30);
  for (const auto& c : report.checks)
    out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {}{}  {}\n", c.stage, stage_w, c.name, name_w,
                       c.node.value_or("-"), node_w, paint(c.status),
                       std::string(6 - std::string(status_name(c.status)).size(), ' '),
                       wrap_words(c.reason, width, reason_at, reason_at));
  auto count = [&](CheckStatus s) {
    return std::count_if(report.checks.begin(), report.checks.end(),
                         [&](const Check& c) { return c.status == s; });
  };
  out += fmt::format("\n{} in {:.1f} s: {} passed, {} warned, {} failed, {} skipped\n",
                     paint(report.overall()), report.seconds, count(CheckStatus::Pass),
                     count(CheckStatus::Warn), count(CheckStatus::Fail), count(CheckStatus::Skip));
  return out;
}

}  // namespace muster::cli
