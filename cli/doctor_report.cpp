#include "cli/doctor_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "cli/network_json.h"
#include "cli/terminal_output.h"
#include "launcher/cluster/hostlist.h"
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
  ReportText clean = markup_text(text);
  replaced += clean.replaced;
  return std::move(clean.text);
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

// The worse of two values of status_value: a failure outranks a warning, and both a pass; a
// skip outranks nothing, though its number is the highest.
double worse_status_value(double kept, double next) {
  auto rank = [](double v) { return v == status_value(CheckStatus::Skip) ? -1.0 : v; };
  return rank(next) > rank(kept) ? next : kept;
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
    kept = worse_status_value(kept, status_value(c.status));
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
      worst = worse_status_value(worst, status_value(c.status));
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

namespace {

// A reason cut at its numbers: the words around them, and the numbers as written. Passes
// whose words agree fold into one row whatever their numbers: every node measures its own
// SSH time, RTT and clock offset, and folded only when equal, those alone kept three rows
// per node of a healthy 64-node cluster.
struct ReasonShape {
  std::vector<std::string> words;    // one more than numbers: the text before, between, after
  std::vector<std::string> numbers;  // "+0.3", "45", "1.2"
};

// What a number must not touch to be one: a number glued to these is part of a name, a
// version or an address ("GPU1", "x16", "6.18.44", "10.88.0.11", "gpu-12"), which folds
// only when equal.
bool joins_words(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '+';
}

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

ReasonShape shape_of(const std::string& reason) {
  ReasonShape shape;
  std::string words;
  size_t i = 0;
  while (i < reason.size()) {
    if (i > 0 && joins_words(reason[i - 1])) {  // inside a word: not where a number starts
      words += reason[i++];
      continue;
    }
    size_t end = i;
    if ((reason[end] == '+' || reason[end] == '-') && end + 1 < reason.size()) ++end;
    const size_t digits = end;
    while (end < reason.size() && is_digit(reason[end])) ++end;
    if (end > digits && end + 1 < reason.size() && reason[end] == '.' && is_digit(reason[end + 1]))
      for (++end; end < reason.size() && is_digit(reason[end]);) ++end;
    if (end > digits && (end == reason.size() || !joins_words(reason[end]))) {
      shape.words.push_back(std::move(words));
      words.clear();
      shape.numbers.push_back(reason.substr(i, end - i));
      i = end;
    } else {
      words += reason[i++];
    }
  }
  shape.words.push_back(std::move(words));
  return shape;
}

// The rows of one kind folded together: the same stage, check, status and reason but for
// its numbers.
struct FoldedRows {
  const Check* first = nullptr;
  ReasonShape shape;
  std::vector<std::string> hosts;
  std::vector<std::vector<std::string>> numbers;  // each row's, in the shape's order
};

// The folded reason: each number that differs between the rows as the range they span
// ("SSH 1.2..3.4 ms"), as written.
std::string folded_reason(const FoldedRows& rows) {
  std::string out = rows.shape.words[0];
  for (size_t k = 0; k < rows.shape.numbers.size(); ++k) {
    const std::string* low = &rows.numbers[0][k];
    const std::string* high = low;
    for (const auto& numbers : rows.numbers) {
      if (std::strtod(numbers[k].c_str(), nullptr) < std::strtod(low->c_str(), nullptr)) low = &numbers[k];
      if (std::strtod(numbers[k].c_str(), nullptr) > std::strtod(high->c_str(), nullptr)) high = &numbers[k];
    }
    out += *low == *high ? *low : *low + ".." + *high;
    out += rows.shape.words[k + 1];
  }
  return out;
}

bool is_problem(CheckStatus s) { return s == CheckStatus::Fail || s == CheckStatus::Warn; }

// One row of the table: a check, the node or host list it stands for, and its reason.
struct TableRow {
  const Check* check;
  std::string nodes;
  std::string reason;
};

// The table's rows: every failure and warning first, one per node, in the order found; then
// the rest folded as `dshbak -c` folds identical output, one row per kind with its host list
// ("10.88.0.[11-74]"), in the order each kind was first found. A check of the whole cluster
// is a row of its own.
std::vector<TableRow> table_rows(const DoctorReport& report) {
  std::vector<TableRow> rows;
  for (const auto& c : report.checks)
    if (is_problem(c.status)) rows.push_back({&c, c.node.value_or("-"), c.reason});
  std::vector<FoldedRows> kinds;
  std::map<std::tuple<std::string, std::string, CheckStatus, std::vector<std::string>>, size_t> kind_of;
  for (const auto& c : report.checks) {
    if (is_problem(c.status)) continue;
    ReasonShape shape = shape_of(c.reason);
    if (!c.node) {
      kinds.push_back({&c, std::move(shape), {}, {}});
      continue;
    }
    auto [at, added] = kind_of.try_emplace({c.stage, c.name, c.status, shape.words}, kinds.size());
    if (added) kinds.push_back({&c, shape, {}, {}});
    kinds[at->second].hosts.push_back(*c.node);
    kinds[at->second].numbers.push_back(std::move(shape.numbers));
  }
  for (const auto& kind : kinds)
    rows.push_back({kind.first, kind.hosts.empty() ? "-" : fold_hostlist(kind.hosts),
                    kind.hosts.size() > 1 ? folded_reason(kind) : kind.first->reason});
  return rows;
}

// A host list in lines of at most `width` columns, broken after its commas; a piece longer
// than a line stands alone.
std::vector<std::string> host_list_lines(const std::string& list, size_t width) {
  std::vector<std::string> lines(1);
  for (size_t start = 0; start < list.size();) {
    const size_t comma = list.find(',', start);
    const size_t end = comma == std::string::npos ? list.size() : comma + 1;
    const std::string piece = list.substr(start, end - start);
    if (!lines.back().empty() && lines.back().size() + piece.size() > width) lines.emplace_back();
    lines.back() += piece;
    start = end;
  }
  return lines;
}

// The longest piece host_list_lines cannot break.
size_t longest_piece(const std::string& list) {
  size_t longest = 0;
  for (size_t start = 0; start < list.size();) {
    const size_t comma = list.find(',', start);
    const size_t end = comma == std::string::npos ? list.size() : comma + 1;
    longest = std::max(longest, end - start);
    start = end;
  }
  return longest;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines(1);
  for (char c : text)
    if (c == '\n') lines.emplace_back();
    else lines.back() += c;
  return lines;
}

}  // namespace

std::string doctor_summary(const DoctorReport& report, bool colour) {
  auto paint = [&](CheckStatus s) {
    std::string word = status_name(s);
    for (auto& ch : word) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    if (!colour) return word;
    const char* code = s == CheckStatus::Pass ? "32" : s == CheckStatus::Warn ? "33"
                       : s == CheckStatus::Fail ? "31" : "2";
    return fmt::format("\033[{}m{}\033[0m", code, word);
  };
  const std::vector<TableRow> rows = table_rows(report);
  size_t stage_w = 8, name_w = 5, node_w = 4, longest_list = 0;
  for (const auto& row : rows) {
    stage_w = std::max(stage_w, row.check->stage.size());
    name_w = std::max(name_w, row.check->name.size());
    node_w = std::max(node_w, longest_piece(row.nodes));
    longest_list = std::max(longest_list, row.nodes.size());
  }
  // REASON is wrapped under itself to fit 80 columns (--json keeps each on one line), with
  // room for 30 columns of it however wide the node names make the columns before. A host
  // list wraps in its own column where it would take REASON's room.
  const size_t before_node = stage_w + name_w + 6 + 4 * 2;
  if (kColumns > before_node + 30) node_w = std::max(node_w, std::min(longest_list, kColumns - before_node - 30));
  const size_t reason_at = before_node + node_w;
  const size_t width = std::max(kColumns, reason_at + 30);
  std::string out = fmt::format("\n{:<{}}  {:<{}}  {:<{}}  {:<6}  {}\n", "STAGE", stage_w, "CHECK",
                                name_w, "NODE", node_w, "STATUS", "REASON");
  for (const auto& row : rows) {
    const Check& c = *row.check;
    const std::vector<std::string> nodes = host_list_lines(row.nodes, node_w);
    const std::vector<std::string> reason = lines_of(wrap_words(row.reason, width - reason_at, 0));
    out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {}{}  {}\n", c.stage, stage_w, c.name, name_w, nodes[0],
                       node_w, paint(c.status), std::string(6 - std::string(status_name(c.status)).size(), ' '),
                       reason[0]);
    for (size_t k = 1; k < std::max(nodes.size(), reason.size()); ++k) {
      std::string line = std::string(stage_w + name_w + 4, ' ') + (k < nodes.size() ? nodes[k] : "");
      if (k < reason.size()) line += std::string(reason_at - line.size(), ' ') + reason[k];
      out += line + "\n";
    }
  }
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
