// muster smoke: a probe rank on every slot says hello, then the collectives run over all of
// them; printed as nccl-tests tables or --json.
#include <memory>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cluster_input.h"
#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/remote_options.h"
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
};

namespace {

// One row of the tables nccl-tests prints, after the table's header when `r` starts a new
// one (`current` is the title of the table printed last).
std::string table_row(const SmokeRow& r, const RankPlan& plan, std::string& current) {
  if (r.op == CollectiveOp::Barrier) return "";
  std::string out;
  std::string title = fmt::format("{} ({}, {} ranks)", op_name(r.op), r.group, r.ranks);
  if (title != current) {
    current = title;
    out += fmt::format("\n# {}\n#{:>11} {:>12} {:>6} {:>6} {:>5} {:>11} {:>8} {:>8} {:>7} {:>11}  {}\n",
                       title, "size", "count", "type", "redop", "root", "time(us)",
                       "algbw", "busbw", "#wrong", "max(us)", "slowest");
  }
  bool reduces = r.op == CollectiveOp::AllReduce || r.op == CollectiveOp::ReduceScatter;
  out += fmt::format(" {:>11} {:>12} {:>6} {:>6} {:>5} {:>11.1f} {:>8.3f} {:>8.3f} {:>7} {:>11.1f}  {}\n",
                     r.bytes, r.count, "float", reduces ? "sum" : "none",
                     r.op == CollectiveOp::Broadcast ? "0" : "-1", r.time_us, r.algbw_gbps,
                     r.busbw_gbps, r.wrong, r.max_time_us, rank_and_host(plan, r.slowest_rank));
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
  void row(const SmokeRow& r, const SmokeReport& so_far) {
    if (!hellos_printed_) {
      std::vector<nlohmann::json> hellos;
      for (const auto& [rank, list] : so_far.hellos) hellos.insert(hellos.end(), list.begin(), list.end());
      print_hellos(hellos, so_far.plan.world_size(), so_far.backend);
    }
    print_out(table_row(r, so_far.plan, current_));
  }
  // The job ended: the hellos, if no row came to print them.
  void end(const SmokeOutcome& o) {
    if (!hellos_printed_ && o.started) print_hellos(o.hellos, o.plan.world_size(), o.backend);
  }

 private:
  void print_hellos(const std::vector<nlohmann::json>& hellos, int world_size, const std::string& backend) {
    hellos_printed_ = true;
    print_out(hello_lines(hellos, world_size, backend));
  }
  bool hellos_printed_ = false;
  std::string current_;
};

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
                       {"slowest_rank", r.slowest_rank},
                       {"slowest_host", r.slowest_rank >= 0 && r.slowest_rank < o.plan.world_size()
                                            ? o.plan.ranks[size_t(r.slowest_rank)].host : ""},
                       {"time_us_by_rank", by_rank}});
  }
  for (const auto& f : o.problems)
    problems.push_back({{"check", finding_name(f.kind)}, {"message", f.message}});
  return {{"backend", o.backend}, {"world_size", o.plan.world_size()}, {"hellos", o.hellos},
          {"results", results}, {"problems", problems}, {"passed", o.problems.empty()}};
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
  request.on_other_line = [](int rank, std::string_view text) {
    print_note_raw(fmt::format("[{}] {}\n", rank, text));
  };
  StreamedTables tables;
  if (!options.json)
    request.on_row = [&tables](const SmokeRow& row, const SmokeReport& so_far) { tables.row(row, so_far); };
  ClusterContext context(load_cluster(options.cluster), options.remote.settings());
  SmokeOutcome outcome = run_smoke(context, request);
  for (const auto& w : outcome.warnings) print_warning(w);
  if (options.json) {
    print_out(report_json_text(report_json(outcome), 2) + "\n");
  } else {
    tables.end(outcome);
    print_out(outcome.problems.empty() ? "\nall checks passed\n" : "\n");
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
  app.add_flag("--pairs", request.settings.pairs, "also every pair of nodes, to name a bad one");
  app.add_option("--timeout", request.collective_timeout_s,
                 "seconds one collective (or the rendezvous) may take before it is aborted")
      ->check(positive())
      ->check(at_most(kLongestWaitSeconds))
      ->capture_default_str();
  app.add_flag("--json", options->json, "print the hellos and per-size results as JSON");
  app.footer("Exit status: 0 when every check passed, 1 when one failed (a node lost during "
             "the test among them), 255 when a node could not be reached, 2 for usage or "
             "configuration errors.");
  return [options]() { return run_smoke_command(*options); };
}

}  // namespace muster::cli
