#include "launcher/job/smoke_check.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/job/smoke_protocol.h"
#include "launcher/job/smoke_rank.h"
#include "launcher/local/node_launch.h"
#include "probes/job_server.h"

namespace muster {
namespace {

// Hands the launcher a JobOutput it may own and destroy, while the collector stays here.
class JobOutputRef : public JobOutput {
 public:
  explicit JobOutputRef(JobOutput& target) : target_(target) {}
  void line(int rank, OutputStream stream, std::string_view text) override {
    target_.line(rank, stream, text);
  }
  void flush() override { target_.flush(); }
  void rank_ended(int rank, const ExitStatus& status) override { target_.rank_ended(rank, status); }
  void launch_warning(const std::string& text) override { target_.launch_warning(text); }

 private:
  JobOutput& target_;
};

Finding problem(FindingKind kind, std::string message) {
  return {kind, Finding::Severity::Fail, std::nullopt, std::move(message)};
}

// Every rank 0..N-1 answered exactly once, from where it was planned, and no GPU or slot
// of one machine serves two ranks (a machine listed twice).
std::vector<Finding> check_hellos(const SmokeReport& c, const RankPlan& plan) {
  std::vector<Finding> found;
  std::vector<int> missing;
  for (int r = 0; r < plan.world_size(); ++r) {
    auto it = c.hellos.find(r);
    if (it == c.hellos.end()) missing.push_back(r);
    else if (it->second.size() > 1 || it->second.front().at("rank") != r)
      found.push_back(problem(FindingKind::Hello,
                              fmt::format("{} answered {} time(s) claiming rank {}",
                                          rank_and_host(plan, r), it->second.size(),
                                          it->second.front().at("rank").get<int>())));
  }
  if (!missing.empty())
    found.push_back(problem(FindingKind::Hello,
                            fmt::format("rank{} {} never said hello", missing.size() > 1 ? "s" : "",
                                        fmt::join(missing, ", "))));
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
      found.push_back(problem(FindingKind::Duplicate, fmt::format(
          "ranks {} are duplicates: they run on {} as {} (machine-id {}); the machine is listed "
          "more than once", fmt::join(ranks, " and "), h.at("host").get<std::string>(),
          h.at("gpu").is_null() ? fmt::format("local rank {}", h.at("local_rank").get<int>())
                                : "GPU " + h.at("gpu").at("pci_bus_id").get<std::string>(),
          h.at("machine_id").get<std::string>())));
    }
  return found;
}

// How the ranks ended: a dead rank fails the run, named, and so do the ranks that never
// arrived at the step that failed.
std::vector<Finding> check_ending(const SmokeReport& c, const LaunchedJob& job) {
  std::vector<Finding> found;
  if (job.result.end == JobEnd::Completed) return found;
  // The likely cause first: ranks stuck inside the step the others gave up waiting on. When
  // nobody gave up (a rank failed, the others saw it), a rank that had not yet reported when
  // the launcher stopped it is no suspect.
  if (c.first_error && c.steps_given_up.count(c.first_error->seq))
    for (int rank : ranks_stuck_in(c.last_enter, c.results, c.first_error->seq))
      found.push_back(problem(FindingKind::Collective, fmt::format(
          "{} hung in {} ({}) at {} bytes: it entered the step and never finished it, while "
          "the others gave up waiting", rank_and_host(job.plan, rank), op_name(c.first_error->op),
          c.first_error->group, c.first_error->bytes)));
  for (const auto& [rank, message] : c.failures)
    found.push_back(problem(FindingKind::Collective,
                            fmt::format("{}: {}", rank_and_host(job.plan, rank), message)));
  if (c.first_error) {
    auto missing = ranks_never_arrived(c.last_enter, job.plan.world_size(), c.first_error->seq);
    if (!missing.empty())
      found.push_back(problem(FindingKind::Collective, fmt::format(
          "{} ({}) at {} bytes was aborted; rank{} that never arrived: {}",
          op_name(c.first_error->op), c.first_error->group, c.first_error->bytes,
          missing.size() > 1 ? "s" : "", fmt::join(missing, ", "))));
  }
  // A rank that died on its own without saying why (killed, crashed) is named even when
  // its peers reported the broken connections that its death caused.
  if (job.result.end == JobEnd::RankFailed) {
    std::set<int> reported;
    for (const auto& f : c.failures) reported.insert(f.first);
    for (const auto& r : job.result.ranks) {
      const bool died_on_its_own = !r.stopped_by_teardown && (!r.status || !r.status->success());
      if (died_on_its_own && !reported.count(r.rank))
        found.push_back(problem(FindingKind::DeadRank,
                                fmt::format("{} {} during the test", rank_and_host(job.plan, r.rank),
                                            r.status ? r.status->describe() : "was lost")));
    }
  }
  for (const auto& note : job.result.notes) found.push_back(problem(FindingKind::DeadRank, note));
  if (found.empty()) found.push_back(problem(FindingKind::DeadRank, "the smoke test did not finish"));
  return found;
}

// Correctness and speed: wrong elements, and the largest all-reduce against the threshold.
std::vector<Finding> check_results(const std::vector<SmokeRow>& rows, const CheckThresholds& checks) {
  std::vector<Finding> found;
  for (const auto& r : rows)
    if (r.wrong > 0)
      found.push_back(problem(FindingKind::Wrong, fmt::format("{} ({}) at {} bytes: {} wrong elements",
                                                              op_name(r.op), r.group, r.bytes, r.wrong)));
  if (auto min_busbw = checks.min_busbw_gbps)
    for (auto it = rows.rbegin(); it != rows.rend(); ++it)
      if (it->op == CollectiveOp::AllReduce && it->group == "world") {
        if (it->busbw_gbps < *min_busbw)
          found.push_back(problem(FindingKind::Busbw,
                                  fmt::format("all_reduce at {} bytes: busbw {:.3f} GB/s is below "
                                              "checks.min_busbw_gbps {:g}", it->bytes,
                                              it->busbw_gbps, *min_busbw)));
        break;
      }
  return found;
}

// The pair's measurements with `node` (each pair with it, or only with `other`).
std::vector<double> measured_with(const CulpritReport& found, int node, std::optional<int> other = {}) {
  std::vector<double> gbps;
  for (const auto& m : found.measured)
    if ((m.a == node && (!other || m.b == *other)) || (m.b == node && (!other || m.a == *other)))
      gbps.push_back(m.gbps);
  std::sort(gbps.begin(), gbps.end());
  return gbps;
}

std::string host_of(const RankPlan& plan, int node) {
  return node >= 0 && size_t(node) < plan.nodes.size() ? plan.nodes[size_t(node)].host : "?";
}

// The node or link the pair search named: what slows every collective across nodes, by name.
std::vector<Finding> check_pair_search(const CulpritReport& found, const RankPlan& plan) {
  std::vector<Finding> out;
  const std::string against =
      fmt::format("below {:g}x the pairs' median of {:.2f} Gbit/s (pair search, {} rounds)",
                  found.typical_gbps > 0 ? found.threshold_gbps / found.typical_gbps : 0, found.typical_gbps,
                  found.rounds);
  for (int node : found.slow_nodes) {
    const auto gbps = measured_with(found, node);
    out.push_back({FindingKind::Bandwidth, Finding::Severity::Fail, node,
                   fmt::format("{}: all_reduce with each of its partners runs at {:.2f} Gbit/s (median "
                               "over {} pairs), {}", host_of(plan, node),
                               gbps.empty() ? 0.0 : gbps[gbps.size() / 2], gbps.size(), against)});
  }
  for (auto [a, b] : found.slow_links) {
    const auto gbps = measured_with(found, a, b);
    out.push_back(problem(FindingKind::Bandwidth,
                          fmt::format("the link {} <-> {} is slow: all_reduce between them runs at {:.2f} "
                                      "Gbit/s (the better of {} measurements), {}; both are fast with "
                                      "other partners", host_of(plan, a), host_of(plan, b),
                                      gbps.empty() ? 0.0 : gbps.back(), gbps.size(), against)));
  }
  return out;
}

}  // namespace

std::vector<std::string> pair_search_unknowns(const CulpritReport& found, const RankPlan& plan) {
  std::vector<std::string> out;
  if (found.split) {
    std::vector<std::string> below;
    for (int node : found.below_the_fast) below.push_back(host_of(plan, node));
    out.push_back(fmt::format("the pair search found bandwidth split: {} of the nodes ({}) are below {:.2f} "
                              "Gbit/s with every partner, while the others reach {:.2f}; with more than half "
                              "below, nothing measured says which is typical: unknown, not a pass; set "
                              "checks.min_bandwidth_gbps and run muster ping --bandwidth to judge each node",
                              below.size(), fmt::join(below, ", "), found.threshold_gbps, found.typical_gbps));
  }
  for (int node : found.unknown)
    out.push_back(fmt::format("the pair search could not tell whether {} is slow: it was slow once, or "
                              "never measured, within {} rounds; run muster smoke --pairs again, or "
                              "muster ping --bandwidth", host_of(plan, node), found.rounds));
  for (auto [a, b] : found.unknown_links)
    out.push_back(fmt::format("the link {} <-> {} was slow once and not measured again within {} rounds: "
                              "unknown, not a failure; muster ping --bandwidth measures it alone",
                              host_of(plan, a), host_of(plan, b), found.rounds));
  return out;
}

void SmokeReport::line(int rank, OutputStream stream, std::string_view text) {
  if (stream == OutputStream::Stdout)
    if (auto j = parse_smoke_line(text)) {
      try {
        record(rank, *j);
        return;
      } catch (const nlohmann::json::exception&) {
        // not a line of this version's protocol: shown as it is
      }
    }
  if (on_other_line_) on_other_line_(rank, text);
}

void SmokeReport::record(int rank, const nlohmann::json& j) {
  const std::string type = j.at("type");
  if (type == "hello") {
    // Every field the checks read is there, of its type, before the hello is kept.
    (void)j.at("rank").get<int>();
    (void)j.at("local_rank").get<int>();
    (void)j.at("host").get<std::string>();
    (void)j.at("machine_id").get<std::string>();
    (void)j.at("node_rank").get<int>();
    (void)j.at("pid").get<long>();
    (void)j.at("cpuset").get<std::string>();
    if (const auto& gpu = j.at("gpu"); !gpu.is_null()) {
      (void)gpu.at("index").get<int>();
      (void)gpu.at("pci_bus_id").get<std::string>();
      (void)gpu.at("model").get<std::string>();
      if (!gpu.at("uuid").is_null()) (void)gpu.at("uuid").get<std::string>();
    }
    hellos[rank].push_back(j);
  } else if (type == "backend") {
    backend = j.at("backend");
  } else if (type == "failure") {
    // A failed collective was already reported by its error event.
    std::pair<int, std::string> f{rank, j.at("message")};
    if (std::find(failures.begin(), failures.end(), f) == failures.end()) failures.push_back(f);
  } else if (type == "culprits" && rank == 0) {
    culprits = culprit_report_from_json(j, int(plan.nodes.size()));
  } else if (type == "enter") {
    const SmokeEvent entered = smoke_event_from_json(j);  // the whole line read before any of it is kept
    last_enter[rank] = entered.seq;
    if (on_step_ && entered.seq > entered_upto_) {
      entered_upto_ = entered.seq;
      on_step_(entered, *this);
    }
    done_upto(rank, entered.seq - 1);
  } else if (type == "skip") {
    done_upto(rank, j.at("seq").get<int>());
  } else if (type == "result" || type == "error") {
    SmokeEvent e = smoke_event_from_json(j);
    if (e.kind == SmokeEvent::Kind::Error) {
      failures.emplace_back(rank, e.message);
      if (e.gave_up) steps_given_up.insert(e.seq);
      if (!first_error || e.seq < first_error->seq) first_error = e;
    }
    results[rank].push_back(e);
    if (on_row_ && e.kind == SmokeEvent::Kind::Result && e.seq > passed_upto_)
      add_to_row(open_rows_[e.seq], rank, e);
    done_upto(rank, e.seq);
  }
}

void SmokeReport::expect(const RankPlan& planned) {
  plan = planned;
  for (int r = 0; r < plan.world_size(); ++r) done_upto_[r] = 0;
  ranks_done_upto_ = {{0, plan.world_size()}};
}

void SmokeReport::done_upto(int rank, int seq) {
  auto it = done_upto_.find(rank);
  if (it == done_upto_.end() || seq <= it->second) return;  // a rank outside the plan waits for none
  if (--ranks_done_upto_[it->second] == 0) ranks_done_upto_.erase(it->second);
  ++ranks_done_upto_[seq];
  it->second = seq;
  pass_on_rows_up_to(ranks_done_upto_.begin()->first);
}

void SmokeReport::pass_on_rows_up_to(int seq) {
  passed_upto_ = std::max(passed_upto_, seq);
  while (!open_rows_.empty() && open_rows_.begin()->first <= seq) {
    SmokeRow row = std::move(open_rows_.begin()->second);
    open_rows_.erase(open_rows_.begin());
    finish_row(row);
    on_row_(row, *this);
  }
}

void SmokeReport::finish() { pass_on_rows_up_to(std::numeric_limits<int>::max()); }

std::string rank_and_host(const RankPlan& plan, int rank) {
  return fmt::format("rank {} ({})", rank,
                     rank >= 0 && rank < plan.world_size() ? plan.ranks[size_t(rank)].host : "?");
}

JobOptions probe_rank_options() {
  JobOptions options;
  options.bind = BindPolicy::Numa;
  return options;
}

namespace {
// --backend nccl on a node without a GPU for each of its ranks: said once per node before
// anything starts, rather than by whichever rank got there first.
std::vector<Finding> ranks_without_gpus(const RankPlan& plan) {
  std::vector<Finding> found;
  for (const auto& node : plan.nodes) {
    const size_t without = size_t(std::count_if(node.ranks.begin(), node.ranks.end(), [&](int r) {
      return !plan.ranks[size_t(r)].gpu.has_value();
    }));
    if (without == 0) continue;
    const std::string which = without == node.ranks.size()
                                  ? fmt::format("its {}", node.ranks.size())
                                  : fmt::format("{} of its {}", without, node.ranks.size());
    found.push_back(problem(FindingKind::Hello,
                            fmt::format("{}: cannot use NCCL: no NVIDIA GPU for {} rank{} (--backend "
                                        "nccl needs one GPU per rank); use --backend gloo, or auto",
                                        node.host, which, node.ranks.size() == 1 ? "" : "s")));
  }
  return found;
}
}  // namespace

SmokeOutcome run_smoke(ClusterContext& context, const SmokeRequest& request) {
  if (request.backend == "nccl") {
    SmokeOutcome outcome;
    outcome.plan = plan_job(context, request.launch.ranks, request.launch.map_by);
    outcome.backend = "nccl";
    outcome.started = false;
    outcome.problems = ranks_without_gpus(outcome.plan);
    if (!outcome.problems.empty()) return outcome;
  }
  const SmokeSettings& settings = request.settings;
  const long timeout_ms = long(request.collective_timeout_s * 1000);
  JobOptions launch = request.launch;
  launch.command = {kMusterSelf, "smoke-rank"};
  launch.exports.push_back("MUSTER_SMOKE=" +
                           smoke_settings_json(settings, request.backend, timeout_ms,
                                               new_job_secret()).dump());
  // A backstop only: every collective and the rendezvous have their own limit.
  const size_t steps = sweep_sizes(settings.min_bytes, settings.max_bytes, settings.step_factor).size() *
                       (settings.ops.size() + 1);
  launch.timeout_s = request.collective_timeout_s * double(steps * 3 + 10);
  // When a rank gives up waiting, the others are given their collective timeout (and a
  // second) to say how they ended: a rank still silent after that is the one that hung.
  launch.gave_up_exit_code = kSmokeRankGaveUpExitCode;
  launch.settle_s = request.collective_timeout_s + 1;

  SmokeReport c(request.on_other_line, request.on_row, request.on_step);
  LaunchedJob job = launch_job(context, launch, [&](const RankPlan& plan) -> std::unique_ptr<JobOutput> {
    c.expect(plan);
    return std::make_unique<JobOutputRef>(c);
  });
  c.finish();

  // Ctrl-C is not a finding: the user stopped the test.
  if (job.result.end == JobEnd::Interrupted)
    throw Interrupted(job.result.received_signal, "during the smoke test; its ranks were stopped");
  SmokeOutcome outcome;
  outcome.plan = job.plan;
  outcome.rows = summarize_smoke(c.results);
  outcome.backend = c.backend;
  outcome.warnings = c.warnings;
  outcome.pair_search = c.culprits;
  if (c.culprits)
    for (auto& w : pair_search_unknowns(*c.culprits, job.plan)) outcome.warnings.push_back(std::move(w));
  for (const auto& [rank, list] : c.hellos)
    for (const auto& h : list) outcome.hellos.push_back(h);
  outcome.problems = smoke_findings(c, job, outcome.rows, context.cluster().checks);
  outcome.min_busbw_gbps = context.cluster().checks.min_busbw_gbps;
  return outcome;
}

std::vector<Finding> smoke_findings(const SmokeReport& report, const LaunchedJob& job,
                                    const std::vector<SmokeRow>& rows, const CheckThresholds& checks) {
  // 1. The hellos: every rank once, none duplicated. 2. How the ranks ended. 3. Results.
  // 4. What the pair search named.
  std::vector<Finding> found = check_hellos(report, job.plan);
  for (auto& f : check_ending(report, job)) found.push_back(std::move(f));
  for (auto& f : check_results(rows, checks)) found.push_back(std::move(f));
  if (report.culprits)
    for (auto& f : check_pair_search(*report.culprits, job.plan)) found.push_back(std::move(f));
  return found;
}

}  // namespace muster
