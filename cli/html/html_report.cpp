#include "cli/html/html_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "launcher/median.h"
#include "launcher/text_bytes.h"

namespace muster::cli {

using json = nlohmann::json;

std::string html_text(std::string_view text) { return markup_text(text).text; }

namespace {

// A string field of `j`, or "" where it is missing or not a string.
std::string text_of(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<double> number_of(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string number(double v) { return fmt::format("{:.3g}", v); }

const char* kStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1400px}
h1{font-size:1.5em;margin:0 0 .2em}h2{font-size:1.15em;margin:1.6em 0 .4em;border-bottom:1px solid #ccc}
.verdict{padding:.1em .5em;border-radius:4px;color:#fff;font-weight:bold}
.pass{background:#1a7f37;color:#fff}.warn{background:#bf8700;color:#fff}.fail{background:#cf222e;color:#fff}
.unknown{background:#6e7781;color:#fff}.skip{background:#d0d7de;color:#222}
table{border-collapse:collapse;margin:.3em 0}td,th{border:1px solid #d0d7de;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f6f8fa}table.grid td{text-align:center;font-size:11px;font-weight:bold}
table.matrix td,table.matrix th{font-size:10px;padding:0 3px;text-align:right}table.matrix td.s{background:#cf222e;color:#fff}
svg text{font:10px system-ui,sans-serif}svg .label.failing{fill:#cf222e;font-weight:bold}
svg .outline{fill:none;stroke:#cf222e;stroke-width:2}svg .link{fill:none;stroke:#000;stroke-width:2}
.legend span{display:inline-block;padding:0 .6em;margin-right:.3em;border-radius:3px}
.note{color:#57606a}
)";

// Five bins of a value against the median, best first: what a heatmap colours by.
const char* kBinColour[] = {"#1a9850", "#91cf60", "#fee08b", "#fc8d59", "#d73027"};
const char* kBinWords[] = {"at least 0.9x the median", "0.75-0.9x", "0.5-0.75x", "0.25-0.5x",
                           "under 0.25x"};
int bin_of(double ratio) {
  if (ratio >= 0.9) return 0;
  if (ratio >= 0.75) return 1;
  if (ratio >= 0.5) return 2;
  if (ratio >= 0.25) return 3;
  return 4;
}

std::string legend(const char* measure) {
  std::string out = fmt::format("<p class=\"legend\">{} against the cluster's median: ", measure);
  for (int b = 0; b < 5; ++b)
    out += fmt::format("<span style=\"background:{}\">{}</span>", kBinColour[b], kBinWords[b]);
  return out + "</p>\n";
}

std::string status_cell(const std::string& status, const std::string& title) {
  const std::string word = status.empty() ? "unknown" : status;
  std::string upper = word;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  if (title.empty()) return fmt::format("<td class=\"{}\">{}</td>", html_text(word), html_text(upper));
  return fmt::format("<td class=\"{}\" title=\"{}\">{}</td>", html_text(word), html_text(title), html_text(upper));
}

// --- the verdict --------------------------------------------------------------------------

std::string overall_status(const json& report) {
  if (const std::string s = text_of(report, "status"); !s.empty()) return s;
  const auto passed = report.find("passed");
  if (passed != report.end() && passed->is_boolean()) return passed->get<bool>() ? "pass" : "fail";
  return "unknown";
}

// A doctor or health report's failures and warnings, failures first; a ping or smoke
// report's problems, and a doctor report's network problems are among its checks already.
std::string verdict_section(const json& report) {
  struct Row {
    std::string status, node, check, device, observed, expected, remedy;
  };
  std::vector<Row> rows;
  if (const auto checks = report.find("checks"); checks != report.end() && checks->is_array()) {
    for (const auto& c : *checks) {
      std::string status = text_of(c, "status");
      if (status != "fail" && status != "warn") continue;
      Row row{status, c.contains("node") && c["node"].is_string() ? c["node"].get<std::string>() : "(cluster)",
              text_of(c, "stage") + ": " + text_of(c, "name"), "", text_of(c, "reason"), "", ""};
      if (const auto f = c.find("finding"); f != c.end() && f->is_object()) {
        if (text_of(*f, "status") == "unknown") row.status = "unknown";
        row.device = text_of(*f, "device");
        if (const std::string o = text_of(*f, "observed"); !o.empty()) row.observed = o;
        row.expected = text_of(*f, "expected");
        row.remedy = text_of(*f, "remedy");
      }
      rows.push_back(row);
    }
  } else if (const auto problems = report.find("problems"); problems != report.end() && problems->is_array()) {
    for (const auto& p : *problems) {
      const std::string severity = text_of(p, "severity");
      rows.push_back({severity.empty() ? "fail" : severity,
                      p.contains("node") && p["node"].is_string() ? p["node"].get<std::string>() : "(cluster)",
                      text_of(p, "check"), "", text_of(p, "message"), "", ""});
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return (a.status == "fail") > (b.status == "fail");
  });
  std::string out = "<section id=\"verdict\"><h2>Failures and warnings</h2>\n";
  if (rows.empty()) return out + "<p>None: every check passed.</p></section>\n";
  out += "<table><tr><th>status</th><th>node</th><th>check</th><th>device</th><th>observed</th>"
         "<th>expected</th><th>remedy</th></tr>\n";
  for (const Row& r : rows)
    out += fmt::format("<tr>{}<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                       status_cell(r.status, r.observed), html_text(r.node), html_text(r.check),
                       html_text(r.device), html_text(r.observed), html_text(r.expected), html_text(r.remedy));
  return out + "</table></section>\n";
}

// --- the network ------------------------------------------------------------------------

// One value per ordered pair, NaN where none was measured: 262,144 cells at 512 nodes.
class PairValues {
 public:
  explicit PairValues(size_t n) : n_(n), cells_(n * n, std::nan("")) {}
  double at(size_t i, size_t j) const { return cells_[i * n_ + j]; }
  void set(size_t i, size_t j, double v) {
    if (std::isnan(cells_[i * n_ + j])) ++measured_;
    cells_[i * n_ + j] = v;
  }
  size_t measured() const { return measured_; }
  std::vector<double> all() const {
    std::vector<double> out;
    for (double v : cells_)
      if (!std::isnan(v)) out.push_back(v);
    return out;
  }

 private:
  size_t n_;
  std::vector<double> cells_;
  size_t measured_ = 0;
};

struct Network {
  std::vector<std::string> hosts;
  std::unordered_map<std::string, size_t> index;
  std::set<std::string> failing;                     // nodes a failure names
  std::set<std::pair<size_t, size_t>> slow_links;    // ordered both ways
  PairValues gbps{0}, rtt_us{0};
};

// The pairs ping measured (a doctor report's under "network"), one value per ordered pair:
// the probe on the interface chosen for the destination where there is one.
std::optional<Network> network_of(const json& report) {
  const json* net = &report;
  if (const auto n = report.find("network"); n != report.end() && n->is_object()) net = &*n;
  const auto nodes = net->find("nodes");
  const auto pairs = net->find("pairs");
  if (nodes == net->end() || pairs == net->end() || !nodes->is_array() || !pairs->is_array()) return std::nullopt;
  Network out;
  for (const auto& n : *nodes) {
    const std::string host = text_of(n, "host");
    if (out.index.emplace(host, out.hosts.size()).second) out.hosts.push_back(host);
  }
  out.gbps = PairValues(out.hosts.size());
  out.rtt_us = PairValues(out.hosts.size());
  std::unordered_map<std::string, std::string> chosen;  // host -> its interface
  if (const auto choices = net->find("choices"); choices != net->end() && choices->is_object())
    if (const auto ifs = choices->find("nccl_socket_ifname"); ifs != choices->end() && ifs->is_object())
      for (const auto& [host, name] : ifs->items())
        if (name.is_string()) chosen[host] = name.get<std::string>().substr(name.get<std::string>().rfind('=') + 1);
  std::vector<bool> on_chosen(out.hosts.size() * out.hosts.size(), false);
  for (const auto& p : *pairs) {
    if (!p.is_object()) continue;
    // One pass over the pair's fields: at 512 nodes there are 261,632 pairs.
    const std::string *src = nullptr, *dst = nullptr, *interface = nullptr;
    std::optional<double> gbps, alone, rtt;
    for (auto field = p.begin(); field != p.end(); ++field) {
      const std::string& key = field.key();
      const json& value = *field;
      if (value.is_string()) {
        if (key == "src") src = value.get_ptr<const std::string*>();
        else if (key == "dst") dst = value.get_ptr<const std::string*>();
        else if (key == "interface") interface = value.get_ptr<const std::string*>();
      } else if (value.is_number()) {
        if (key == "bandwidth_gbps") gbps = value.get<double>();
        else if (key == "bandwidth_alone_gbps") alone = value.get<double>();
      } else if (key == "rtt_us" && value.is_object()) {
        rtt = number_of(value, "median");
      }
    }
    if (!src || !dst) continue;
    const auto a = out.index.find(*src), b = out.index.find(*dst);
    if (a == out.index.end() || b == out.index.end() || a->second == b->second) continue;
    const size_t i = a->second, j = b->second, key = i * out.hosts.size() + j;
    const auto want = chosen.find(*dst);
    const bool chosen_one = interface && want != chosen.end() && want->second == *interface;
    if (on_chosen[key] && !chosen_one) continue;  // the chosen interface's probe is shown
    if (chosen_one) on_chosen[key] = true;
    if (alone && (!gbps || *alone > *gbps)) gbps = alone;
    if (gbps) out.gbps.set(i, j, *gbps);
    if (rtt) out.rtt_us.set(i, j, *rtt);
  }
  // Without the whole mesh (doctor measures bandwidth by the pair search), the pairs the
  // search measured, both ways at once: a sparse matrix, each cell the slower way.
  if (out.gbps.measured() == 0)
    if (const auto search = net->find("search"); search != net->end() && search->is_object())
      if (const auto measured = search->find("pairs"); measured != search->end() && measured->is_array())
        for (const auto& m : *measured) {
          const auto a = out.index.find(text_of(m, "a")), b = out.index.find(text_of(m, "b"));
          const auto gbps = number_of(m, "bandwidth_gbps");
          if (a == out.index.end() || b == out.index.end() || a->second == b->second || !gbps) continue;
          out.gbps.set(a->second, b->second, *gbps);
          out.gbps.set(b->second, a->second, *gbps);
        }
  if (const auto problems = net->find("problems"); problems != net->end() && problems->is_array())
    for (const auto& p : *problems) {
      if (text_of(p, "severity") != "fail") continue;
      if (p.contains("node") && p["node"].is_string()) out.failing.insert(p["node"].get<std::string>());
      if (const auto link = p.find("link"); link != p.end() && link->is_array() && link->size() == 2 &&
                                            (*link)[0].is_string() && (*link)[1].is_string()) {
        const auto a = out.index.find((*link)[0].get<std::string>()), b = out.index.find((*link)[1].get<std::string>());
        if (a != out.index.end() && b != out.index.end()) {
          out.slow_links.insert({a->second, b->second});
          out.slow_links.insert({b->second, a->second});
        }
      }
    }
  return out;
}

// One measure of every ordered pair: higher is better (bandwidth) or worse (RTT).
struct Measure {
  const char* id;     // the section's id
  const char* title;
  const char* unit;
  bool higher_is_better;
  const PairValues* values;
};

double ratio_to(double value, double median, bool higher_is_better) {
  if (median <= 0 || value <= 0) return value > 0 || median <= 0 ? 1.0 : 0.0;
  return higher_is_better ? value / median : median / value;
}

// A square heatmap: row = source, column = destination; failing nodes' rows and columns and
// slow links outlined; every cell's pair and value on hover.
std::string heatmap_svg(const Network& net, const Measure& m, double median) {
  const size_t n = net.hosts.size();
  size_t label = 0;
  for (const auto& h : net.hosts) label = std::max(label, std::min<size_t>(h.size(), 24));
  const double cell = std::clamp(720.0 / double(n), 6.0, 28.0);
  const double margin = 12 + 6.0 * double(label);
  const double size = margin + cell * double(n) + 4;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"heatmap\" id=\"{}-heatmap\" width=\"{:.0f}\" "
      "height=\"{:.0f}\" role=\"img\" aria-label=\"{} of every ordered pair\">\n",
      m.id, size, size, m.title);
  auto short_name = [](const std::string& host) { return host.size() > 24 ? host.substr(0, 23) + "~" : host; };
  for (size_t i = 0; i < n; ++i) {
    const bool failing = net.failing.count(net.hosts[i]) > 0;
    const std::string cls = failing ? "label failing" : "label";
    const double at = margin + cell * (double(i) + 0.5);
    out += fmt::format("<text class=\"{} row\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" "
                       "dominant-baseline=\"middle\">{}</text>\n",
                       cls, margin - 4, at, html_text(short_name(net.hosts[i])));
    out += fmt::format("<text class=\"{} column\" transform=\"translate({:.1f},{:.1f}) rotate(-90)\" "
                       "dominant-baseline=\"middle\">{}</text>\n",
                       cls, at, margin - 4, html_text(short_name(net.hosts[i])));
  }
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      if (i == j) continue;
      const double x = margin + cell * double(j), y = margin + cell * double(i);
      const double value = m.values->at(i, j);
      const std::string pair = html_text(net.hosts[i] + " \u2192 " + net.hosts[j]);
      if (std::isnan(value)) {
        out += fmt::format("<rect class=\"cell none\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
                           "fill=\"#eee\"><title>{}: not measured</title></rect>\n",
                           x, y, cell, cell, pair);
        continue;
      }
      const double ratio = ratio_to(value, median, m.higher_is_better);
      const bool slow = net.slow_links.count({i, j}) > 0;
      out += fmt::format("<rect class=\"cell{}\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
                         "fill=\"{}\"><title>{}: {} {} ({:.2f}x the median){}</title></rect>\n",
                         slow ? " slow-link" : "", x, y, cell, cell, kBinColour[bin_of(ratio)], pair,
                         number(value), m.unit, ratio, slow ? "; a slow link" : "");
    }
  // Outlines over the cells: a failing node's row and column, a slow link's two cells.
  for (size_t i = 0; i < n; ++i) {
    if (!net.failing.count(net.hosts[i])) continue;
    const double at = margin + cell * double(i), span = cell * double(n);
    out += fmt::format("<rect class=\"outline failing\" data-node=\"{}\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" "
                       "height=\"{:.1f}\"><title>{} failed</title></rect>\n",
                       html_text(net.hosts[i]), margin, at, span, cell, html_text(net.hosts[i]));
    out += fmt::format("<rect class=\"outline failing\" data-node=\"{}\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" "
                       "height=\"{:.1f}\"><title>{} failed</title></rect>\n",
                       html_text(net.hosts[i]), at, margin, cell, span, html_text(net.hosts[i]));
  }
  for (const auto& [i, j] : net.slow_links)
    out += fmt::format("<rect class=\"link\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"/>\n",
                       margin + cell * double(j), margin + cell * double(i), cell, cell);
  return out + "</svg>\n";
}

// Past kHeatmapNodes: a row per node (the median of what it sends and receives against the
// cluster's), then every ordered pair in a compact table, slow ones marked.
std::string per_node_view(const Network& net, const Measure& m, double median) {
  const size_t n = net.hosts.size();
  std::vector<std::vector<double>> sending(n), receiving(n);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (const double v = m.values->at(i, j); !std::isnan(v)) {
        sending[i].push_back(v);
        receiving[j].push_back(v);
      }
  std::string out = "<table class=\"per-node\"><tr><th>node</th><th>sending (median)</th><th>receiving (median)</th></tr>\n";
  auto cell = [&](const std::vector<double>& values) {
    if (values.empty()) return std::string("<td>not measured</td>");
    const double v = muster::median(values), ratio = ratio_to(v, median, m.higher_is_better);
    return fmt::format("<td style=\"background:{}\" title=\"{:.2f}x the median\">{} {}</td>", kBinColour[bin_of(ratio)],
                       ratio, number(v), m.unit);
  };
  for (size_t i = 0; i < n; ++i)
    out += fmt::format("<tr class=\"{}\"><th>{}</th>{}{}</tr>\n", net.failing.count(net.hosts[i]) ? "failing" : "",
                       html_text(net.hosts[i]), cell(sending[i]), cell(receiving[i]));
  out += "</table>\n<details><summary>Every ordered pair (" + std::string(m.unit) +
         "; row: from, column: to)</summary><table class=\"matrix\"><tr><th></th>";
  for (size_t j = 0; j < n; ++j) out += "<th>" + html_text(net.hosts[j]);
  out += "</tr>\n";
  // Closing tags left out (HTML allows it) and short numbers: 262,144 cells at 512 nodes.
  auto to = std::back_inserter(out);
  for (size_t i = 0; i < n; ++i) {
    out += "<tr><th>" + html_text(net.hosts[i]);
    for (size_t j = 0; j < n; ++j) {
      const double v = m.values->at(i, j);
      if (std::isnan(v)) {
        out += "<td>";
        continue;
      }
      out += ratio_to(v, median, m.higher_is_better) < 0.5 ? "<td class=s>" : "<td>";
      if (v >= 100) fmt::format_to(to, "{:.0f}", v);
      else fmt::format_to(to, "{:.3g}", v);
    }
    out += "</tr>\n";
  }
  return out + "</table></details>\n";
}

std::string network_sections(const Network& net) {
  std::string out;
  const Measure measures[] = {{"bandwidth", "Pair bandwidth", "Gbit/s", true, &net.gbps},
                              {"rtt", "Pair round-trip time", "us", false, &net.rtt_us}};
  for (const Measure& m : measures) {
    if (m.values->measured() == 0) continue;
    const double median = muster::median(m.values->all());
    out += fmt::format("<section id=\"{}\"><h2>{}</h2>\n<p>{} nodes, {} ordered pairs measured, median {} {}.",
                       m.id, m.title, net.hosts.size(), m.values->measured(), number(median), m.unit);
    std::vector<std::string> failing(net.failing.begin(), net.failing.end());
    if (!failing.empty()) {
      out += " Failing: ";
      for (size_t k = 0; k < failing.size(); ++k) out += (k ? ", " : "") + html_text(failing[k]);
      out += ".";
    }
    std::set<std::pair<size_t, size_t>> links;
    for (auto [a, b] : net.slow_links) links.insert({std::min(a, b), std::max(a, b)});
    for (auto [a, b] : links)
      out += " Slow link: " + html_text(net.hosts[a]) + " \u2194 " + html_text(net.hosts[b]) + ".";
    out += "</p>\n" + legend(m.higher_is_better ? "Each cell's value" : "Each cell's speed (median / RTT)");
    out += net.hosts.size() <= kHeatmapNodes ? heatmap_svg(net, m, median) : per_node_view(net, m, median);
    out += "</section>\n";
  }
  return out;
}

// The pair search's rounds (ping --search, doctor past 16 nodes, smoke --pairs).
std::string pair_search_section(const json& report) {
  const json* search = nullptr;
  for (const json* where : {&report, report.contains("network") ? &report["network"] : nullptr}) {
    if (!where || !where->is_object()) continue;
    for (const char* key : {"search", "pair_search"})
      if (const auto s = where->find(key); s != where->end() && s->is_object()) search = &*s;
  }
  if (!search) return "";
  std::string out = "<section id=\"pair-search\"><h2>Pair search</h2>\n<p>";
  if (const auto rounds = number_of(*search, "rounds")) out += fmt::format("{} rounds", *rounds);
  if (const auto t = number_of(*search, "threshold_gbps")) out += fmt::format("; bar {} Gbit/s", number(*t));
  for (const char* key : {"slow_nodes", "unknown"})
    if (const auto list = search->find(key); list != search->end() && list->is_array() && !list->empty()) {
      out += fmt::format("; {}: ", key[0] == 's' ? "slow nodes" : "unknown nodes");
      for (size_t k = 0; k < list->size(); ++k)
        out += (k ? ", " : "") + html_text((*list)[k].is_string() ? (*list)[k].get<std::string>() : "?");
    }
  out += "</p>\n";
  const auto measured = search->contains("measured") ? search->find("measured") : search->find("pairs");
  if (measured != search->end() && measured->is_array()) {
    out += "<table><tr><th>round</th><th>a</th><th>b</th><th>Gbit/s</th></tr>\n";
    for (const auto& m : *measured) {
      const auto gbps = m.contains("gbps") ? number_of(m, "gbps") : number_of(m, "bandwidth_gbps");
      out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                         number_of(m, "round") ? number(*number_of(m, "round")) : "", html_text(text_of(m, "a")),
                         html_text(text_of(m, "b")), gbps ? number(*gbps) : "");
    }
    out += "</table>\n";
  }
  return out + "</section>\n";
}

// --- topology, the health grid, smoke's curves ---------------------------------------------

std::string path_colour(const std::string& cell) {
  if (cell == "X") return "#d0d7de";
  if (cell.rfind("NV", 0) == 0) return "#1a9850";
  if (cell == "PIX") return "#91cf60";
  if (cell == "PXB") return "#d9ef8b";
  if (cell == "PHB") return "#fee08b";
  if (cell == "NODE") return "#fc8d59";
  if (cell == "SYS") return "#d73027";
  return "#ffffff";
}

std::string topology_section(const json& report) {
  const auto types = report.find("topology");
  if (types == report.end() || !types->is_array() || types->empty()) return "";
  std::string out = "<section id=\"topology\"><h2>GPU paths by node type</h2>\n<p class=\"legend\">As nvidia-smi "
                    "topo -m reads, best first: ";
  for (const char* p : {"NV#", "PIX", "PXB", "PHB", "NODE", "SYS"})
    out += fmt::format("<span style=\"background:{}\">{}</span>", path_colour(p == std::string("NV#") ? "NV1" : p), p);
  out += "</p>\n";
  for (const auto& type : *types) {
    const auto devices = type.value("devices", json::array());
    const auto rows = type.value("rows", json::array());
    const auto nearest = type.value("nearest_nics", json::array());
    std::vector<std::string> hosts, models;
    for (const auto& h : type.value("hosts", json::array())) hosts.push_back(h.is_string() ? h.get<std::string>() : "?");
    for (const auto& m : type.value("gpu_models", json::array())) models.push_back(m.is_string() ? m.get<std::string>() : "?");
    std::string host_list;
    for (size_t k = 0; k < hosts.size() && k < 16; ++k) host_list += (k ? ", " : "") + hosts[k];
    if (hosts.size() > 16) host_list += fmt::format(" and {} more", hosts.size() - 16);
    out += fmt::format("<h3>{} node{}: {}</h3>\n<p>{}</p>\n<table class=\"paths\"><tr><th></th>", hosts.size(),
                       hosts.size() == 1 ? "" : "s", html_text(host_list),
                       html_text(models.empty() ? std::string("no GPU") : models.front()));
    for (const auto& d : devices) out += "<th>" + html_text(d.is_string() ? d.get<std::string>() : "?") + "</th>";
    out += "<th>nearest NICs</th></tr>\n";
    for (size_t g = 0; g < rows.size(); ++g) {
      out += "<tr><th>" + html_text(g < devices.size() && devices[g].is_string() ? devices[g].get<std::string>() : "?") + "</th>";
      for (const auto& c : rows[g]) {
        const std::string word = c.is_string() ? c.get<std::string>() : "?";
        out += fmt::format("<td style=\"background:{}\">{}</td>", path_colour(word), html_text(word));
      }
      std::string near;
      if (g < nearest.size() && nearest[g].is_array())
        for (const auto& nic : nearest[g]) near += (near.empty() ? "" : ", ") + (nic.is_string() ? nic.get<std::string>() : "?");
      out += "<td>" + html_text(near) + "</td></tr>\n";
    }
    out += "</table>\n";
  }
  return out + "</section>\n";
}

// Rows are nodes, columns are checks: each status as colour and word, its reason on hover.
std::string health_grid_section(const json& report) {
  const auto checks = report.find("checks");
  if (checks == report.end() || !checks->is_array()) return "";
  std::vector<std::string> nodes, columns;
  std::map<std::string, size_t> node_at, column_at;
  std::map<std::pair<size_t, size_t>, std::pair<std::string, std::string>> cells;  // status, reason
  for (const auto& c : *checks) {
    if (!c.contains("node") || !c["node"].is_string()) continue;
    const std::string node = c["node"], column = text_of(c, "stage") + ": " + text_of(c, "name");
    if (node_at.emplace(node, nodes.size()).second) nodes.push_back(node);
    if (column_at.emplace(column, columns.size()).second) columns.push_back(column);
    std::string status = text_of(c, "status");
    if (const auto f = c.find("finding"); f != c.end() && f->is_object() && text_of(*f, "status") == "unknown")
      status = "unknown";
    auto& slot = cells[{node_at[node], column_at[column]}];
    // Two checks of one name on a node (two GPUs' ECC): the worst is shown.
    auto rank = [](const std::string& s) { return s == "fail" ? 4 : s == "unknown" ? 3 : s == "warn" ? 2 : s == "pass" ? 1 : 0; };
    if (slot.first.empty() || rank(status) > rank(slot.first)) slot = {status, text_of(c, "reason")};
  }
  if (nodes.empty()) return "";
  std::string out = "<section id=\"health-grid\"><h2>Every node's checks</h2>\n<table class=\"grid\"><tr><th>node</th>";
  for (const auto& col : columns) out += "<th>" + html_text(col) + "</th>";
  out += "</tr>\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    out += "<tr><th>" + html_text(nodes[i]) + "</th>";
    for (size_t j = 0; j < columns.size(); ++j) {
      const auto it = cells.find({i, j});
      // A pass says nothing more on hover; at 512 nodes its reasons would be half the page.
      out += it == cells.end() ? "<td></td>"
                               : status_cell(it->second.first, it->second.first == "pass" ? "" : it->second.second);
    }
    out += "</tr>\n";
  }
  return out + "</table></section>\n";
}

// Bus bandwidth against message size, a line per collective (and group), log2 sizes.
std::string busbw_section(const json& report) {
  const auto results = report.find("results");
  if (results == report.end() || !results->is_array() || results->empty()) return "";
  std::map<std::string, std::vector<std::pair<double, double>>> series;
  double most_bytes = 1, least_bytes = 0, most_gbps = 0;
  for (const auto& r : *results) {
    const auto bytes = number_of(r, "bytes"), busbw = number_of(r, "busbw_gbps");
    if (!bytes || !busbw || *bytes <= 0) continue;
    const std::string group = text_of(r, "group");
    series[text_of(r, "op") + (group.empty() || group == "world" ? "" : " (" + group + ")")].push_back({*bytes, *busbw});
    most_bytes = std::max(most_bytes, *bytes);
    least_bytes = least_bytes == 0 ? *bytes : std::min(least_bytes, *bytes);
    most_gbps = std::max(most_gbps, *busbw);
  }
  if (series.empty()) return "";
  const auto expected = number_of(report, "min_busbw_gbps");
  if (expected) most_gbps = std::max(most_gbps, *expected);
  most_gbps = most_gbps > 0 ? most_gbps * 1.1 : 1;
  const double width = 720, height = 320, left = 50, bottom = 30;
  const double lo = std::log2(std::max(1.0, least_bytes)), hi = std::max(lo + 1, std::log2(most_bytes));
  auto x = [&](double bytes) { return left + (std::log2(bytes) - lo) / (hi - lo) * (width - left - 10); };
  auto y = [&](double gbps) { return height - bottom - gbps / most_gbps * (height - bottom - 10); };
  const char* colours[] = {"#0969da", "#8250df", "#bf3989", "#1a7f37", "#9a6700", "#cf222e", "#57606a"};
  std::string out = fmt::format("<section id=\"busbw\"><h2>Bus bandwidth by message size</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
                                "width=\"{:.0f}\" height=\"{:.0f}\" role=\"img\" aria-label=\"bus bandwidth\">\n", width, height);
  out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#888\"/><line x1=\"{0}\" y1=\"10\" x2=\"{0}\" "
                     "y2=\"{1}\" stroke=\"#888\"/>\n", left, height - bottom, width - 10);
  out += fmt::format("<text x=\"{0}\" y=\"8\">busbw, Gbit/s</text><text x=\"{1}\" y=\"{2:.0f}\" text-anchor=\"end\">"
                     "message size, bytes</text>\n", left, width - 10, height - 1);
  for (int k = 0; k <= 4; ++k) {
    const double g = most_gbps * k / 4;
    out += fmt::format("<text x=\"{:.0f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", left - 4, y(g), number(g));
  }
  for (double e = std::ceil(lo); e <= hi; e += std::max(1.0, std::floor((hi - lo) / 8))) {
    const double bytes = std::exp2(e);
    const std::string words = bytes >= 1 << 20 ? fmt::format("{}M", bytes / (1 << 20))
                              : bytes >= 1 << 10 ? fmt::format("{}K", bytes / (1 << 10))
                                                 : fmt::format("{}", bytes);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text>\n", x(bytes), height - 12, words);
  }
  if (expected)
    out += fmt::format("<line class=\"expected\" x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#cf222e\" "
                       "stroke-dasharray=\"6 4\"><title>expected: checks.min_busbw_gbps {3} Gbit/s</title></line>\n",
                       left, y(*expected), width - 10, number(*expected));
  size_t k = 0;
  std::string key;
  for (auto& [name, points] : series) {
    std::sort(points.begin(), points.end());
    const char* colour = colours[k++ % 7];
    std::string path;
    for (const auto& [bytes, gbps] : points) path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "M" : " L", x(bytes), y(gbps));
    out += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", path, colour);
    for (const auto& [bytes, gbps] : points)
      out += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{}: {} bytes, {} Gbit/s</title></circle>\n",
                         x(bytes), y(gbps), colour, html_text(name), number(bytes), number(gbps));
    key += fmt::format("<span style=\"background:{};color:#fff\">{}</span>", colour, html_text(name));
  }
  out += "</svg>\n<p class=\"legend\">" + key +
         (expected ? fmt::format(" <span style=\"border:1px dashed #cf222e\">expected {} Gbit/s</span>", number(*expected)) : "") +
         "</p></section>\n";
  return out;
}

}  // namespace

std::string html_report(const json& report, std::string_view command) {
  const std::string status = overall_status(report);
  std::string subject = text_of(report, "cluster");
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
      "<title>muster {}: {}{}</title><style>{}</style></head><body>\n",
      html_text(command), html_text(status), subject.empty() ? "" : " \u2014 " + html_text(subject), kStyle);
  std::string upper = status;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  out += fmt::format("<header><h1>muster {} <span class=\"verdict {}\">{}</span></h1><p class=\"note\">{}{}</p></header>\n",
                     html_text(command), html_text(status), html_text(upper), html_text(subject),
                     number_of(report, "duration_s") ? fmt::format(" \u00b7 {:.1f} s", *number_of(report, "duration_s")) : "");
  out += verdict_section(report);
  if (const auto net = network_of(report)) out += network_sections(*net);
  out += pair_search_section(report);
  out += busbw_section(report);
  out += topology_section(report);
  out += health_grid_section(report);
  out += fmt::format("<footer class=\"note\"><p>muster {}</p></footer>\n</body></html>\n",
                     html_text(text_of(report, "muster_version")));
  return out;
}

}  // namespace muster::cli
