// The HTML page of a report: one self-contained file (inline CSS and SVG, no script, nothing
// fetched) that a person takes in at a glance, drawn from the same JSON report that --json
// prints, never from the terminal's text. One renderer for doctor, health, ping and smoke:
// each section is drawn when its data is in the report.
//   - the verdict first: every failure and warning with its node, device, observed,
//     expected and remedy (a doctor or health report's checks, a ping or smoke report's
//     problems);
//   - pair bandwidth and RTT heatmaps, one cell per ordered pair coloured against the
//     cluster's median, failing nodes and slow links outlined and named, every value on hover
//     (an SVG <title>); past kHeatmapNodes nodes, one row per node and the full per-pair
//     table under it;
//   - each node type's GPU path matrix, coloured by path as nvidia-smi topo -m reads;
//   - the per-node grid of checks, each status as colour and word;
//   - smoke's bus bandwidth against message size per collective, with the expected line,
//     and the pair search's results.
// Every string from the report is untrusted (node names, a node's output): it is escaped in
// one place, html_text(), and stays text.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace muster::cli {

// Past this many nodes a heatmap's cells are too small to see: a row per node instead.
inline constexpr size_t kHeatmapNodes = 64;

// `command` is the subcommand whose report it is ("doctor", "health", "ping", "smoke").
std::string html_report(const nlohmann::json& report, std::string_view command);

// Text for HTML, in an element or a quoted attribute: bytes that are not UTF-8 and control
// characters replaced with U+FFFD (as the JUnit report does), and & < > " ' escaped.
std::string html_text(std::string_view text);

}  // namespace muster::cli
