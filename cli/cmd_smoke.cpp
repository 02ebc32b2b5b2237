// muster smoke: a probe rank on every slot says hello, then the collectives run over all of
// them; printed as nccl-tests tables or --json.
#include <memory>
#include <optional>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cluster_input.h"
#include "cli/commands.h"
#include "cli/doctor_progress.h"
#include "cli/flag_checks.h"
#include "cli/remote_options.h"
#include "cli/report_flags.h"
#include "cli/terminal_output.h"
#include "launcher/error.h"
#include "launcher/job/smoke_check.h"
#include "launcher/text_bytes.h"

namespace muster::cli {

struct SmokeOptions {
  ClusterInput cluster;
  RemoteFlags remote;
  SmokeRequest request;
  std::string min_bytes = "8", max_bytes = "4M";
  std::string split;  // "node" or none
  bool json = false;
  std::string html_file;
};

namespace {

// A row of the pair search, under one table for all its pairs: which two nodes, and how fast.
std::string host_of(const RankPlan& plan, int node) {
  return node >= 0 && size_t(node) < plan.nodes.size() ? plan.nodes[size_t(node)].host : "?";
}

std::string pair_row(const SmokeRow& r, std::pair<int, int> nodes, const RankPlan& plan, std::string& current) {
  auto host = [&](int node) { return host_of(plan, node); };
  std::string out;
  if (current != "pairs") {
    current = "pairs";
    out += fmt::format("\n# pair search: all_reduce between one rank of each node, rounds of disjoint pairs\n"
                       "#{:>32} {:>11} {:>11} {:>8} {:>8} {:>7}\n",
                       "pair", "size", "time(us)", "algbw", "busbw", "#wrong");
  }
  return out + fmt::format(" {:>32} {:>11} {:>11.1f} {:>8.3f} {:>8.3f} {:>7}\n",
                           fmt::format("{} <-> {}", host(nodes.first), host(nodes.second)), r.bytes,
                           r.time_us, r.algbw_gbps, r.busbw_gbps, r.wrong);
}

// One row of the tables nccl-tests prints, after the table's header when `r` starts a new
// one (`current` is the title of the table printed last). max(us) is the slowest rank's
// time; it names no rank, since in a ring every rank waits on the slowest link.
std::string table_row(const SmokeRow& r, const RankPlan& plan, std::string& current) {
  if (r.op == CollectiveOp::Barrier) return "";
  if (auto nodes = nodes_of_pair_group(r.group)) return pair_row(r, *nodes, plan, current);
  std::string out;
  std::string title = fmt::format("{} ({}, {} ranks)", op_name(r.op), r.group, r.ranks);
  if (title != current) {
    current = title;
    out += fmt::format("\n# {}\n#{:>11} {:>12} {:>6} {:>6} {:>5} {:>11} {:>8} {:>8} {:>7} {:>11}\n",
                       title, "size", "count", "type", "redop", "root", "time(us)",
                       "algbw", "busbw", "#wrong", "max(us)");
  }
  bool reduces = r.op == CollectiveOp::AllReduce || r.op == CollectiveOp::ReduceScatter;
  out += fmt::format(" {:>11} {:>12} {:>6} {:>6} {:>5} {:>11.1f} {:>8.3f} {:>8.3f} {:>7} {:>11.1f}\n",
                     r.bytes, r.count, "float", reduces ? "sum" : "none",
                     r.op == CollectiveOp::Broadcast ? "0" : "-1", r.time_us, r.algbw_gbps,
                     r.busbw_gbps, r.wrong, r.max_time_us);
  return out;
}

// "hello from N of M ranks; backend B", then one line per rank, as nccl-tests prints them:
// where it ran and on which GPU (every field read here was checked when the hello was kept).
std::string hello_lines(const std::vector<nlohmann::json>& hellos, int world_size, const std::string& backend) {
  std::string out = fmt::format("hello from {} of {} ranks; backend {}\n", hellos.size(), world_size, backend);
  for (const auto& h : hellos) {
    const auto& gpu = h.at("gpu");
    out += fmt::format("#  rank {:>3} on {} (node {}) pid {}: {}\n", h.at("rank").get<int>(),
                       h.at("host").get<std::string>(), h.at("node_rank").get<int>(),
                       h.at("pid").get<long>(),
                       gpu.is_null() ? "CPUs " + h.at("cpuset").get<std::string>()
                                     : fmt::format("GPU {} {} {}{}", gpu.at("index").get<int>(),
                                                   gpu.at("pci_bus_id").get<std::string>(),
                                                   gpu.at("model").get<std::string>(),
                                                   gpu.at("uuid").is_null()
                                                       ? "" : " " + gpu.at("uuid").get<std::string>()));
  }
  return out;
}

// The text report printed as the sweep goes, as nccl-tests prints it: the hellos before the
// first row, then each row as soon as it is measured.
class StreamedTables {
 public:
  // `progress`, on a terminal: the step that runs now, on a line below the tables.
  explicit StreamedTables(DoctorProgress* progress) : progress_(progress) {}
  void step(const SmokeEvent& entered, const SmokeReport& so_far) {
    if (!progress_) return;
    std::string what = entered.group;
    if (auto nodes = nodes_of_pair_group(entered.group))
      what = fmt::format("pair search, {} <-> {}", host_of(so_far.plan, nodes->first), host_of(so_far.plan, nodes->second));
    progress_->begin_stage(fmt::format("{} ({}) {} bytes", op_name(entered.op), what, entered.bytes), 0, "");
  }
  // The progress line is going: nothing more is drawn above it.
  void end_progress() { progress_ = nullptr; }
  void row(const SmokeRow& r, const SmokeReport& so_far) {
    if (!hellos_printed_) {
      std::vector<nlohmann::json> hellos;
      for (const auto& [rank, list] : so_far.hellos) hellos.insert(hellos.end(), list.begin(), list.end());
      print_hellos(hellos, so_far.plan.world_size(), so_far.backend);
    }
    print(table_row(r, so_far.plan, current_));
  }
  // The job ended: the hellos, if no row came to print them.
  void end(const SmokeOutcome& o) {
    if (!hellos_printed_ && o.started) print_hellos(o.hellos, o.plan.world_size(), o.backend);
  }

 private:
  void print_hellos(const std::vector<nlohmann::json>& hellos, int world_size, const std::string& backend) {
    hellos_printed_ = true;
    print(hello_lines(hellos, world_size, backend));
  }
  void print(std::string_view text) {
    if (progress_) progress_->print_above(text);
    else print_out(text);
  }
  DoctorProgress* progress_;
  bool hellos_printed_ = false;
  std::string current_;
};

// What the pair search found and measured, by host name.
nlohmann::json pair_search_json(const CulpritReport& found, const RankPlan& plan) {
  auto host = [&](int node) { return host_of(plan, node); };
  auto hosts = [&](const std::vector<int>& nodes) {
    nlohmann::json out = nlohmann::json::array();
    for (int n : nodes) out.push_back(host(n));
    return out;
  };
  auto links = [&](const std::vector<std::pair<int, int>>& pairs) {
    nlohmann::json out = nlohmann::json::array();
    for (auto [a, b] : pairs) out.push_back({host(a), host(b)});
    return out;
  };
  nlohmann::json measured = nlohmann::json::array();
  for (const auto& m : found.measured)
    measured.push_back({{"a", host(m.a)}, {"b", host(m.b)}, {"gbps", m.gbps}, {"round", m.round}});
  return {{"slow_nodes", hosts(found.slow_nodes)}, {"slow_links", links(found.slow_links)},
          {"unknown", hosts(found.unknown)}, {"unknown_links", links(found.unknown_links)},
          {"split", found.split}, {"below_the_fast", hosts(found.below_the_fast)},
          {"typical_gbps", found.typical_gbps}, {"threshold_gbps", found.threshold_gbps},
          {"rounds", found.rounds}, {"measured", measured}};
}

nlohmann::json report_json(const SmokeOutcome& o) {
  nlohmann::json results = nlohmann::json::array(), problems = nlohmann::json::array();
  for (const auto& r : o.rows) {
    if (r.op == CollectiveOp::Barrier) continue;
    nlohmann::json by_rank = nlohmann::json::object();
    for (const auto& [rank, t] : r.time_us_by_rank) by_rank[std::to_string(rank)] = t;
    results.push_back({{"group", r.group}, {"op", op_name(r.op)}, {"bytes", r.bytes},
                       {"count", r.count}, {"type", "float"}, {"ranks", r.ranks},
                       {"time_us", r.time_us}, {"max_time_us", r.max_time_us},
                       {"algbw_gbps", r.algbw_gbps},
                       {"busbw_gbps", r.busbw_gbps}, {"wrong", r.wrong},
                       {"time_us_by_rank", by_rank}});
  }
  for (const auto& f : o.problems)
    problems.push_back({{"check", finding_name(f.kind)}, {"message", f.message}});
  nlohmann::json out = {{"backend", o.backend}, {"world_size", o.plan.world_size()}, {"hellos", o.hellos},
                        {"results", results}, {"problems", problems}, {"warnings", o.warnings},
                        {"passed", o.problems.empty()}};
  if (o.pair_search) out["pair_search"] = pair_search_json(*o.pair_search, o.plan);
  if (o.min_busbw_gbps) out["min_busbw_gbps"] = *o.min_busbw_gbps;
  return out;
}

int run_smoke_command(SmokeOptions& options) {
  SmokeRequest& request = options.request;
  request.settings.min_bytes = parse_bytes(options.min_bytes);
  request.settings.max_bytes = parse_bytes(options.max_bytes);
  if (request.settings.max_bytes < request.settings.min_bytes)
    throw Error(ErrorKind::Usage, fmt::format("--max-bytes {} is smaller than --min-bytes {}; "
                                              "give a range from small to large",
                                              options.max_bytes, options.min_bytes));
  request.settings.split_node = options.split == "node";
  request.launch.ranks = options.cluster.ranks;
  request.launch.map_by = options.cluster.map_by;
  // On a terminal, the step that runs now stays in view: a slow link's steps take long.
  std::optional<DoctorProgress> progress;
  if (isatty(STDERR_FILENO)) progress.emplace(true);
  request.on_other_line = [&progress](int rank, std::string_view text) {
    if (progress) progress->other_line(rank, text);
    else print_note_raw(fmt::format("[{}] {}\n", rank, text));
  };
  StreamedTables tables(progress ? &*progress : nullptr);
  if (!options.json)
    request.on_row = [&tables](const SmokeRow& row, const SmokeReport& so_far) { tables.row(row, so_far); };
  request.on_step = [&tables](const SmokeEvent& entered, const SmokeReport& so_far) { tables.step(entered, so_far); };
  ClusterContext context(load_cluster(options.cluster), options.remote.settings());
  // An all-reduce below the cluster file's expectation is followed by the pair search, which
  // names what slows it.
  request.settings.pairs_below_busbw_gbps = context.cluster().checks.min_busbw_gbps;
  SmokeOutcome outcome = run_smoke(context, request);
  tables.end_progress();
  progress.reset();
  for (const auto& w : outcome.warnings) print_warning(w);
  if (!options.html_file.empty()) write_html_report(options.html_file, report_json(outcome), "smoke");
  if (options.json) {
    print_out(report_json_text(report_json(outcome), 2) + "\n");
  } else {
    tables.end(outcome);
    // Warnings say what could not be told: not "all checks passed".
    if (!outcome.problems.empty()) print_out("\n");
    else if (!outcome.warnings.empty())
      print_out(fmt::format("\nno check failed; {} warning{} above say{} what could not be told\n",
                            outcome.warnings.size(), outcome.warnings.size() > 1 ? "s" : "",
                            outcome.warnings.size() > 1 ? "" : "s"));
    else print_out("\nall checks passed\n");
    for (const auto& p : outcome.problems) print_out(fmt::format("FAIL {}\n", p.message));
  }
  return outcome.problems.empty() ? 0 : 1;
}

}  // namespace

size_t parse_bytes(const std::string& text) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    value = -1;  // not a number at all: reported below like any bad size
  }
  std::string unit = text.substr(pos);
  double scale = unit.empty() ? 1 : unit == "K" || unit == "KB" ? 1024
                 : unit == "M" || unit == "MB" ? 1 << 20 : unit == "G" || unit == "GB" ? 1 << 30 : -1;
  if (scale < 0 || !(value > 0) || value * scale > double(size_t(1) << 40))
    throw Error(ErrorKind::Usage, fmt::format("'{}' is not a size; write e.g. 8, 64K, 128M", text));
  return size_t(value * scale);
}

CommandAction setup_smoke(CLI::App& app) {
  auto options = std::make_shared<SmokeOptions>();
  SmokeRequest& request = options->request;
  add_cluster_input_options(app, options->cluster);
  add_remote_flags(app, options->remote, RemoteUse::Agents);
  app.add_option("-x,--export", request.launch.exports,
                 "add VAR=VALUE (or VAR) to every probe rank, e.g. -x NCCL_DEBUG=INFO")
      ->allow_extra_args(false);
  add_choice(app, "--bind", request.launch.bind, bind_choices(),
             "numa: each probe rank the NUMA node of its GPU (its backend's threads need "
             "more than one core); core: its share of those cores; none", "numa");
  app.add_option("--backend", request.backend, "auto: NCCL when every rank has an NVIDIA GPU "
                                               "and NCCL loads, else Gloo")
      ->check(CLI::IsMember({"auto", "nccl", "gloo"}))
      ->capture_default_str();
  app.add_option("--min-bytes", options->min_bytes, "smallest size (nccl-tests -b)")->capture_default_str();
  app.add_option("--max-bytes", options->max_bytes, "largest size (nccl-tests -e)")->capture_default_str();
  app.add_option("--step-factor", request.settings.step_factor, "size multiplier (nccl-tests -f)")
      ->check(in_range(1.01, 1024))
      ->capture_default_str();
  app.add_option("--iters", request.settings.iters, "timed iterations per size")
      ->check(in_range(1, 100000, true))
      ->capture_default_str();
  app.add_option("--warmup", request.settings.warmup, "untimed iterations per size")
      ->check(in_range(0, 100000, true))
      ->capture_default_str();
  app.add_option("--split", options->split, "node: also within every node and across nodes")
      ->check(CLI::IsMember({"node"}));
  app.add_flag("--pairs", request.settings.pairs,
               "also the pair search: rounds of disjoint node pairs that name a slow node or link");
  app.add_option("--timeout", request.collective_timeout_s,
                 "seconds one collective (or the rendezvous) may take before it is aborted")
      ->check(positive())
      ->check(at_most(kLongestWaitSeconds))
      ->capture_default_str();
  app.add_flag("--json", options->json, "print the hellos and per-size results as JSON");
  add_html_flag(app, options->html_file);
  app.footer("Exit status: 0 when every check passed, 1 when one failed (a node lost during "
             "the test among them), 255 when a node could not be reached, 2 for usage or "
             "configuration errors.");
  return [options]() { return run_smoke_command(*options); };
}

}  // namespace muster::cli
