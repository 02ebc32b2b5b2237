// muster ping: how every node is reached, the RTT between every pair, and the interface
// choice that follows.
#include <algorithm>
#include <functional>
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cluster_input.h"
#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/network_json.h"
#include "cli/remote_options.h"
#include "cli/report_flags.h"
#include "cli/terminal_output.h"
#include "launcher/cluster/cluster_input.h"
#include "launcher/job/cluster_context.h"
#include "launcher/job/cluster_ping.h"
#include "launcher/job/network_verdicts.h"
#include "launcher/text_bytes.h"

namespace muster::cli {

struct PingCliOptions {
  ClusterInput cluster;
  RemoteFlags remote;
  int count = 50;
  bool bandwidth = false;
  bool matrix = false;
  bool search = false;
  bool json = false;
  std::string html_file;
};

namespace {

// Why MASTER_ADDR is not on the first node, or is on one that failed a check.
std::string rendezvous_note(const PingReport& r) {
  const auto host = [&](int i) { return r.nodes[size_t(i)].host; };
  if (r.rendezvous_passed_over)
    return fmt::format(" (on {}: {}, the first node, failed a check)", host(r.rendezvous_node),
                       host(*r.rendezvous_passed_over));
  if (r.rendezvous_on_failed_node)
    return fmt::format(" (on {}, which failed a check: every node reached failed one)", host(r.rendezvous_node));
  return "";
}

// The probe shown for a pair: on the chosen subnet's address when there is one.
const PairProbe* shown_probe(const PingReport& r, int src, int dst) {
  const PairProbe* first = nullptr;
  for (const auto& p : r.pairs) {
    if (p.src != src || p.dst != dst) continue;
    if (!first) first = &p;
    auto it = r.choice.interface_of.find(dst);
    if (it != r.choice.interface_of.end() && p.interface == it->second) return &p;
  }
  return first;
}

// Past this many nodes a matrix no longer fits a screen: its outliers are shown instead.
constexpr size_t kWholeMatrixNodes = 16;

using MatrixCell = std::function<std::string(const PairProbe*, size_t, size_t)>;
using PairValue = std::function<std::optional<double>(const PairProbe&)>;

// The column headers: the hosts' names where every one fits its cell, else [0] .. [n-1] with
// a legend, so that names alike in their first characters (10.88.0.1 and 10.88.0.10) are
// never cut into one.
std::string matrix_legend(const PingReport& r, size_t cell, std::vector<std::string>& labels) {
  const bool fit = std::all_of(r.nodes.begin(), r.nodes.end(),
                               [&](const NodeStatus& n) { return n.host.size() < cell; });
  std::string legend, line = "columns:";
  for (size_t j = 0; j < r.nodes.size(); ++j) {
    labels.push_back(fit ? r.nodes[j].host : fmt::format("[{}]", j));
    if (fit) continue;
    const std::string entry = fmt::format(" {} = {}{}", labels.back(), r.nodes[j].host, j + 1 < r.nodes.size() ? "," : "");
    if (line.size() + entry.size() > kColumns && line.size() > 2) {  // wrapped within the terminal's width
      legend += line + "\n";
      line = " ";
    }
    line += entry;
  }
  return fit ? "" : legend + line + "\n";
}

// A node-by-node matrix, row to column, one cell per ordered pair. Past what 80 columns
// hold, the columns come in blocks, each under its own header, as a wide table is printed.
std::string matrix_text(const PingReport& r, size_t width, const std::string& title, const MatrixCell& cell) {
  constexpr size_t kCell = 10;
  const size_t n = r.nodes.size();
  const size_t per_block = std::max<size_t>(1, (kColumns - std::min(kColumns, width + 2)) / kCell);
  std::vector<std::string> labels;
  std::string out = fmt::format("\n{}, row to column:\n{}", title, matrix_legend(r, kCell, labels));
  for (size_t first = 0; first < n; first += per_block) {
    const size_t last = std::min(n, first + per_block);
    if (first > 0) out += "\n";
    out += fmt::format("{:<{}}", "", width + 2);
    for (size_t j = first; j < last; ++j) out += fmt::format("{:>{}}", labels[j], kCell);
    out += "\n";
    for (size_t i = 0; i < n; ++i) {
      out += fmt::format("  {:<{}}", r.nodes[i].host, width);
      for (size_t j = first; j < last; ++j)
        out += fmt::format("{:>{}}", i == j ? "-" : cell(shown_probe(r, int(i), int(j)), i, j), kCell);
      out += "\n";
    }
  }
  return out;
}

// For a cluster too large for a matrix: the median over pairs and the five pairs furthest
// from it the bad way (`worst_is_high`: the largest are worst, as for RTT).
std::string summary_text(const PingReport& r, const std::string& title, const PairValue& value,
                         bool worst_is_high) {
  std::vector<std::pair<double, const PairProbe*>> measured;
  size_t unmeasured = 0;
  for (const auto& p : r.pairs)
    if (auto v = value(p)) measured.emplace_back(*v, &p);
    else ++unmeasured;
  const std::string not_measured = unmeasured ? fmt::format(", {} not measured", unmeasured) : "";
  std::string out = fmt::format("\n{} over {} pairs", title, measured.size());
  if (measured.empty()) return out + not_measured + "\n";
  std::sort(measured.begin(), measured.end());
  out += fmt::format(": median {:.2f}{}; the worst:\n", measured[(measured.size() - 1) / 2].first, not_measured);
  if (worst_is_high) std::reverse(measured.begin(), measured.end());
  for (size_t k = 0; k < std::min<size_t>(5, measured.size()); ++k) {
    const PairProbe& p = *measured[k].second;
    out += fmt::format("  {} -> {} at {}: {:.2f}\n", r.nodes[size_t(p.src)].host, r.nodes[size_t(p.dst)].host,
                       p.address, measured[k].first);
  }
  return out + "(--matrix prints every pair)\n";
}

std::string report_text(const PingReport& r, const std::optional<CulpritReport>& search, bool whole_matrix) {
  std::string out = "reaching each node (ms): resolve / TCP / SSH+auth / command\n";
  size_t width = 4;
  for (const auto& n : r.nodes) width = std::max(width, n.host.size());
  for (const auto& n : r.nodes) {
    if (!n.reach.ok) {
      out += fmt::format("  {:<{}}  FAILED  {}\n", n.host, width, n.reach.failure);
      continue;
    }
    if (n.here) {
      out += fmt::format("  {:<{}}  this machine: muster runs here, no SSH\n", n.host, width);
      continue;
    }
    out += fmt::format("  {:<{}}  {:6.2f} {:6.2f} {:7.2f} {:7.2f}   clock {:+.2f} ms\n", n.host,
                       width, n.reach.timings.resolve_ms, n.reach.timings.tcp_connect_ms,
                       n.reach.timings.ssh_ms, n.reach.command_rtt_ms, n.clock_offset_ms.value_or(0));
  }
  std::vector<int> outliers;
  for (const auto& p : r.problems)
    if (p.kind == FindingKind::Rtt && p.severity == Finding::Severity::Warn && p.node)
      outliers.push_back(*p.node);
  const bool here = std::all_of(r.nodes.begin(), r.nodes.end(), [](const NodeStatus& n) { return n.here; });
  const PairValue rtt_us = [](const PairProbe& p) {
    return p.result.reachable ? std::optional(p.result.rtt.median_us) : std::nullopt;
  };
  const PairValue gbps = [](const PairProbe& p) { return p.best_gbps(); };
  if (here) {
    out += "\nno pairs to probe: every node is this machine\n";
  } else if (!whole_matrix && r.nodes.size() > kWholeMatrixNodes) {
    out += summary_text(r, "median RTT (us)", rtt_us, true);
    if (r.bandwidth_measured) out += summary_text(r, "bandwidth (Gbit/s)", gbps, false);
  } else {
    out += matrix_text(r, width, "median RTT (us)", [&](const PairProbe* p, size_t i, size_t j) {
      if (!p) return std::string("?");
      if (!p->result.reachable) return std::string("UNREACH");
      bool marked = std::count(outliers.begin(), outliers.end(), int(i)) ||
                    std::count(outliers.begin(), outliers.end(), int(j));
      return fmt::format("{:.0f}{}", p->result.rtt.median_us, marked ? "*" : "");
    });
    if (r.bandwidth_measured)
      out += matrix_text(r, width, "bandwidth (Gbit/s)", [&](const PairProbe* p, size_t, size_t) {
        const auto v = p ? gbps(*p) : std::nullopt;
        return v ? fmt::format("{:.2f}", *v) : std::string("?");
      });
  }
  if (search)
    out += fmt::format("\nbandwidth by pairs, both ways at once: {} pairs in {} rounds, median {:.2f} Gbit/s\n",
                       search->measured.size(), search->rounds, search->typical_gbps);
  out += "\n";
  if (r.problems.empty()) out += "no problems found\n";
  for (const auto& p : r.problems)
    out += fmt::format("{} {}\n", p.severity == Finding::Severity::Fail ? "FAIL" : "warn", p.message);
  out += fmt::format("\nMASTER_ADDR: {}{}\n", r.choice.master_addr.value_or("(none every node reached)"),
                     rendezvous_note(r));
  if (!r.choice.interface_of.empty()) {
    out += fmt::format("NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (subnet {}):", r.choice.subnet);
    for (const auto& [node, name] : r.choice.interface_of)
      out += fmt::format(" {}: ={}", r.nodes[size_t(node)].host, name);
    out += "\n";
  }
  return out;
}

}  // namespace

CommandAction setup_ping(CLI::App& app) {
  auto options = std::make_shared<PingCliOptions>();
  add_cluster_input_options(app, options->cluster, RankFlags::Omitted);
  add_remote_flags(app, options->remote, RemoteUse::Agents);
  app.add_option("--count", options->count, "round trips per pair and address (K)")
      ->check(in_range(1, 100000, true))
      ->capture_default_str();
  auto* bandwidth = app.add_flag("--bandwidth", options->bandwidth, "also measure bulk TCP throughput per pair");
  app.add_flag("--search", options->search,
               "find slow nodes and links by pairs in a few rounds, not the whole mesh's n-1 "
               "(what doctor does past 16 nodes)")
      ->excludes(bandwidth);
  app.add_flag("--matrix", options->matrix,
               fmt::format("print every pair's matrix past {} nodes, not the outliers", kWholeMatrixNodes));
  app.add_flag("--json", options->json, "print the whole report as JSON");
  add_html_flag(app, options->html_file);
  app.footer("Without -f, -H or --hostfile: this machine, without SSH.\n"
             "Exit status: 0 when every check passed, 1 when one failed, 255 when a node "
             "could not be reached, 2 for usage or configuration errors.");
  return [options]() {
    ClusterContext context(load_cluster(options->cluster), options->remote.settings());
    PingOptions ping;
    ping.round_trips = options->count;
    ping.bandwidth = options->bandwidth;
    // This machine alone is reached without SSH, as run and doctor reach it.
    PingReport report = context.is_local() ? ping_here(context.cluster())
                                           : ping_cluster(context.session(Reach::BestEffort),
                                                          context.cluster(), ping, context.interrupt_fds());
    std::optional<CulpritReport> search;
    if (options->search && !context.is_local()) {
      search = search_slow_pairs(context.session(Reach::BestEffort), context.cluster(), report, ping,
                                 context.interrupt_fds());
      for (auto& f : slow_pair_findings(context.cluster(), report, *search)) report.problems.push_back(std::move(f));
      place_rendezvous(context.cluster(), report);
    }
    if (!options->html_file.empty()) write_html_report(options->html_file, ping_json(report, search), "ping");
    print_out(options->json ? report_json_text(ping_json(report, search), 2) + "\n"
                            : report_text(report, search, options->matrix));
    const bool unreached = std::any_of(report.nodes.begin(), report.nodes.end(),
                                       [](const NodeStatus& n) { return !n.reach.ok; });
    return unreached ? 255 : report.failed() ? 1 : 0;
  };
}

}  // namespace muster::cli
