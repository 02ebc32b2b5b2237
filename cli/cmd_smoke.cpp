// muster smoke: a probe rank on every slot says hello, then the collectives run over all
// of them (and, on request, within nodes, across nodes and between node pairs), each
// element checked exactly, timed like nccl-tests.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/job_launch.h"
#include "cli/smoke_checks.h"
#include "cli/smoke_protocol.h"
#include "cli/terminal_output.h"
#include "launcher/error.h"
#include "launcher/cluster/hostfile.h"
#include "launcher/local/node_launch.h"

namespace muster::cli {


namespace {

// Collects every rank's smoke lines; anything else a rank prints goes to stderr, tagged.
class SmokeCollector : public JobOutput {
 public:
  SmokeCollector() = default;
  void line(int rank, OutputStream stream, std::string_view text) override {
    if (stream == OutputStream::Stdout) {
      if (auto j = parse_smoke_line(text)) {
        record(rank, *j);
        return;
      }
    }
    print_note_raw(fmt::format("[{}] {}\n", rank, text));
  }
  void flush() override {}

  std::map<int, std::vector<nlohmann::json>> hellos;  // by the rank that printed it
  std::map<int, std::vector<SmokeEvent>> results;
  std::map<int, int> last_enter;
  std::vector<std::pair<int, std::string>> failures;   // rank, message
  std::optional<SmokeEvent> first_error;               // the earliest step that failed
  std::string backend = "?";

 private:
  void record(int rank, const nlohmann::json& j) {
    const std::string type = j.value("type", "");
    if (type == "hello") hellos[rank].push_back(j);
    else if (type == "backend") backend = j.at("backend");
    else if (type == "failure") {
      // A failed collective was already reported by its error event.
      std::pair<int, std::string> f{rank, j.at("message")};
      if (std::find(failures.begin(), failures.end(), f) == failures.end()) failures.push_back(f);
    }
    else if (type == "enter") last_enter[rank] = j.at("seq");
    else if (type == "result" || type == "error") {
      SmokeEvent e = smoke_event_from_json(j);
      if (e.kind == SmokeEvent::Kind::Error) {
        failures.emplace_back(rank, e.message);
        if (!first_error || e.seq < first_error->seq) first_error = e;
      }
      results[rank].push_back(e);
    }
  }
};

// Hands the launcher a JobOutput it may own and destroy, while the collector stays here.
class JobOutputRef : public JobOutput {
 public:
  explicit JobOutputRef(JobOutput& target) : target_(target) {}
  void line(int rank, OutputStream stream, std::string_view text) override {
    target_.line(rank, stream, text);
  }
  void flush() override { target_.flush(); }
  void rank_ended(int rank, const ExitStatus& status) override { target_.rank_ended(rank, status); }

 private:
  JobOutput& target_;
};

using Finding = SmokeProblem;

std::string rank_and_host(const RankPlan& plan, int rank) {
  return fmt::format("rank {} ({})", rank, rank < plan.world_size() ? plan.ranks[size_t(rank)].host : "?");
}

// Every rank 0..N-1 answered exactly once, from where it was planned, and no GPU or slot
// of one machine serves two ranks (a machine listed twice).
std::vector<Finding> check_hellos(const SmokeCollector& c, const RankPlan& plan) {
  std::vector<Finding> found;
  std::vector<int> missing;
  for (int r = 0; r < plan.world_size(); ++r) {
    auto it = c.hellos.find(r);
    if (it == c.hellos.end()) missing.push_back(r);
    else if (it->second.size() > 1 || it->second.front().at("rank") != r)
      found.push_back({"hello", fmt::format("{} answered {} time(s) claiming rank {}",
                                            rank_and_host(plan, r), it->second.size(),
                                            it->second.front().at("rank").get<int>())});
  }
  if (!missing.empty())
    found.push_back({"hello", fmt::format("rank{} {} never said hello", missing.size() > 1 ? "s" : "",
                                          fmt::join(missing, ", "))});
  std::map<std::string, std::vector<int>> by_slot;
  for (const auto& [rank, list] : c.hellos) {
    const auto& h = list.front();
    std::string machine = h.at("machine_id").get<std::string>() + "@" + h.at("host").get<std::string>();
    std::string slot = h.at("gpu").is_null()
                           ? fmt::format("{}: local rank {}", machine, h.at("local_rank").get<int>())
                           : fmt::format("{}: GPU {}", machine, h.at("gpu").at("pci_bus_id").get<std::string>());
    by_slot[slot].push_back(rank);
  }
  for (const auto& [slot, ranks] : by_slot)
    if (ranks.size() > 1) {
      const auto& h = c.hellos.at(ranks.front()).front();
      found.push_back({"duplicate", fmt::format(
          "ranks {} are duplicates: they run on {} as {} (machine-id {}); the machine is listed "
          "more than once", fmt::join(ranks, " and "), h.at("host").get<std::string>(),
          h.at("gpu").is_null() ? fmt::format("local rank {}", h.at("local_rank").get<int>())
                                : "GPU " + h.at("gpu").at("pci_bus_id").get<std::string>(),
          h.at("machine_id").get<std::string>())});
    }
  return found;
}

std::string table(const std::vector<SmokeRow>& rows, const RankPlan& plan) {
  std::string out;
  std::string current;
  for (const auto& r : rows) {
    if (r.op == CollectiveOp::Barrier) continue;
    std::string title = fmt::format("{} ({}, {} ranks)", op_name(r.op), r.group, r.ranks);
    if (title != current) {
      current = title;
      out += fmt::format("\n# {}\n#{:>11} {:>12} {:>6} {:>6} {:>5} {:>11} {:>8} {:>8} {:>7}  {}\n",
                         title, "size", "count", "type", "redop", "root", "time(us)",
                         "algbw", "busbw", "#wrong", "slowest");
    }
    bool reduces = r.op == CollectiveOp::AllReduce || r.op == CollectiveOp::ReduceScatter;
    out += fmt::format(" {:>11} {:>12} {:>6} {:>6} {:>5} {:>11.1f} {:>8.3f} {:>8.3f} {:>7}  {}\n",
                       r.bytes, r.count, "float", reduces ? "sum" : "none",
                       r.op == CollectiveOp::Broadcast ? "0" : "-1", r.time_us, r.algbw_gbps,
                       r.busbw_gbps, r.wrong, rank_and_host(plan, r.slowest_rank));
  }
  return out;
}

nlohmann::json report_json(const SmokeCollector& c, const std::vector<SmokeRow>& rows,
                           const std::vector<Finding>& findings, const RankPlan& plan) {
  nlohmann::json hellos = nlohmann::json::array(), results = nlohmann::json::array(),
                 problems = nlohmann::json::array();
  for (const auto& [rank, list] : c.hellos)
    for (const auto& h : list) hellos.push_back(h);
  for (const auto& r : rows) {
    if (r.op == CollectiveOp::Barrier) continue;
    nlohmann::json by_rank = nlohmann::json::object();
    for (const auto& [rank, t] : r.time_us_by_rank) by_rank[std::to_string(rank)] = t;
    results.push_back({{"group", r.group}, {"op", op_name(r.op)}, {"bytes", r.bytes},
                       {"count", r.count}, {"type", "float"}, {"ranks", r.ranks},
                       {"time_us", r.time_us}, {"algbw_gbps", r.algbw_gbps},
                       {"busbw_gbps", r.busbw_gbps}, {"wrong", r.wrong},
                       {"slowest_rank", r.slowest_rank},
                       {"slowest_host", r.slowest_rank >= 0 && r.slowest_rank < plan.world_size()
                                            ? plan.ranks[size_t(r.slowest_rank)].host : ""},
                       {"time_us_by_rank", by_rank}});
  }
  for (const auto& f : findings) problems.push_back({{"check", f.check}, {"message", f.message}});
  return {{"backend", c.backend}, {"world_size", plan.world_size()}, {"hellos", hellos},
          {"results", results}, {"problems", problems}, {"passed", findings.empty()}};
}

}  // namespace

SmokeOutcome run_smoke_checks(SmokeOptions& options) {
  options.settings.split_node = options.split == "node";
  const long timeout_ms = long(options.collective_timeout_s * 1000);
  JobLaunchOptions launch = options.launch;
  launch.command = {kMusterSelf, "smoke-rank"};
  launch.exports.push_back("MUSTER_SMOKE=" +
                           smoke_settings_json(options.settings, options.backend, timeout_ms).dump());
  // A backstop only: every collective and the rendezvous have their own limit.
  const size_t steps = sweep_sizes(options.settings.min_bytes, options.settings.max_bytes,
                                   options.settings.step_factor).size() * (options.settings.ops.size() + 1);
  launch.timeout_s = options.collective_timeout_s * double(steps * 3 + 10);

  SmokeCollector c;
  LaunchedJob job = launch_job(launch, [&](const RankPlan&) -> std::unique_ptr<JobOutput> {
    return std::make_unique<JobOutputRef>(c);
  });

  // 1. The hellos: every rank once, none duplicated.
  std::vector<Finding> findings = check_hellos(c, job.plan);
  // 2. How the ranks ended: a dead rank fails the run, named.
  if (job.result.end != JobEnd::Completed) {
    for (const auto& [rank, message] : c.failures)
      findings.push_back({"collective", fmt::format("{}: {}", rank_and_host(job.plan, rank), message)});
    if (c.first_error) {
      auto missing = ranks_never_arrived(c.last_enter, job.plan.world_size(), c.first_error->seq);
      if (!missing.empty())
        findings.push_back({"collective", fmt::format(
            "{} ({}) at {} bytes was aborted; rank{} that never arrived: {}",
            op_name(c.first_error->op), c.first_error->group, c.first_error->bytes,
            missing.size() > 1 ? "s" : "", fmt::join(missing, ", "))});
    }
    // A rank that died on its own without saying why (killed, crashed) is named even when
    // its peers reported the broken connections that its death caused.
    std::set<int> reported;
    for (const auto& f : c.failures) reported.insert(f.first);
    for (const auto& r : job.result.ranks) {
      const bool died_on_its_own = !r.stopped_by_teardown && (!r.status || !r.status->success());
      if (job.result.end == JobEnd::RankFailed && died_on_its_own && !reported.count(r.rank))
        findings.push_back({"rank", fmt::format("{} {} during the test",
                                                rank_and_host(job.plan, r.rank),
                                                r.status ? r.status->describe() : "was lost")});
    }
    if (findings.empty()) findings.push_back({"rank", "the smoke test did not finish"});
  }
  // 3. Correctness and speed.
  std::vector<SmokeRow> rows = summarize_smoke(c.results);
  for (const auto& r : rows)
    if (r.wrong > 0)
      findings.push_back({"wrong", fmt::format("{} ({}) at {} bytes: {} wrong elements",
                                               op_name(r.op), r.group, r.bytes, r.wrong)});
  if (auto min_busbw = job.checks.min_busbw_gbps) {
    for (auto it = rows.rbegin(); it != rows.rend(); ++it)
      if (it->op == CollectiveOp::AllReduce && it->group == "world") {
        if (it->busbw_gbps < *min_busbw)
          findings.push_back({"busbw", fmt::format("all_reduce at {} bytes: busbw {:.3f} GB/s is "
                                                   "below checks.min_busbw_gbps {:g}", it->bytes,
                                                   it->busbw_gbps, *min_busbw)});
        break;
      }
  }

  SmokeOutcome outcome;
  outcome.plan = job.plan;
  outcome.rows = rows;
  outcome.backend = c.backend;
  outcome.hellos = int(c.hellos.size());
  outcome.problems = findings;
  outcome.json = report_json(c, rows, findings, job.plan);
  outcome.text = fmt::format("hello from {} of {} ranks; backend {}\n", c.hellos.size(),
                             job.plan.world_size(), c.backend) + table(rows, job.plan);
  return outcome;
}

namespace {

int run_smoke(SmokeOptions& options) {
  SmokeOutcome outcome = run_smoke_checks(options);
  if (options.json) {
    print_out(outcome.json.dump(2) + "\n");
  } else {
    print_out(outcome.text);
    print_out(outcome.problems.empty() ? "\nall checks passed\n" : "\n");
    for (const auto& p : outcome.problems) print_out(fmt::format("FAIL {}\n", p.message));
  }
  return outcome.problems.empty() ? 0 : 1;
}

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
  if (scale < 0 || value <= 0)
    throw Error(ErrorKind::Usage, fmt::format("'{}' is not a size; write e.g. 8, 64K, 128M", text));
  return size_t(value * scale);
}

}  // namespace

CommandAction setup_smoke(CLI::App& app) {
  auto options = std::make_shared<SmokeOptions>();
  auto min_bytes = std::make_shared<std::string>("8");
  auto max_bytes = std::make_shared<std::string>("4M");
  add_cluster_input_options(app, options->launch.cluster);
  add_remote_flags(app, options->launch.remote, true);
  app.add_option("-x,--export", options->launch.exports,
                 "add VAR=VALUE (or VAR) to every probe rank, e.g. -x NCCL_DEBUG=INFO")
      ->allow_extra_args(false);
  app.add_option("--backend", options->backend, "auto: NCCL when every rank has an NVIDIA GPU "
                                                "and NCCL loads, else Gloo")
      ->check(CLI::IsMember({"auto", "nccl", "gloo"}))
      ->capture_default_str();
  app.add_option("--min-bytes", *min_bytes, "smallest size (nccl-tests -b)")->capture_default_str();
  app.add_option("--max-bytes", *max_bytes, "largest size (nccl-tests -e)")->capture_default_str();
  app.add_option("--step-factor", options->settings.step_factor, "size multiplier (nccl-tests -f)")
      ->check(CLI::Range(1.01, 1024.0))
      ->capture_default_str();
  app.add_option("--iters", options->settings.iters, "timed iterations per size")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", options->settings.warmup, "untimed iterations per size")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app.add_option("--split", options->split, "node: also within every node and across nodes")
      ->check(CLI::IsMember({"node"}));
  app.add_flag("--pairs", options->settings.pairs, "also every pair of nodes, to name a bad one");
  app.add_option("--timeout", options->collective_timeout_s,
                 "seconds one collective (or the rendezvous) may take before it is aborted")
      ->check(positive())
      ->capture_default_str();
  app.add_flag("--json", options->json, "print the hellos and per-size results as JSON");
  app.footer("Exit status: 0 when every check passed, 1 when one failed, 2 for usage or "
             "configuration errors.");
  return [options, min_bytes, max_bytes]() {
    options->settings.min_bytes = parse_bytes(*min_bytes);
    options->settings.max_bytes = parse_bytes(*max_bytes);
    if (options->settings.max_bytes < options->settings.min_bytes)
      throw Error(ErrorKind::Usage, fmt::format("--max-bytes {} is smaller than --min-bytes {}; "
                                                "give a range from small to large",
                                                *max_bytes, *min_bytes));
    return run_smoke(*options);
  };
}

}  // namespace muster::cli
