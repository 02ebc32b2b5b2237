#include "cli/job_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/terminal_output.h"
#include "launcher/text_bytes.h"

namespace muster::cli {

void report_job_end(const LaunchedJob& job, double timeout_s) {
  const JobResult& result = job.result;
  const RankPlan& plan = job.plan;
  int stopped = 0;
  for (const auto& r : result.ranks)  // a rank that aborted the job is no other rank stopped
    stopped += r.stopped_by_teardown && !(result.aborted && result.aborted->rank == r.rank);
  const std::string others = fmt::format("stopped {} other rank{}", stopped, stopped == 1 ? "" : "s");
  std::string stopped_text;  // after a failure, the ranks it stopped; after a stop, every rank
  switch (result.end) {
    case JobEnd::Completed: break;
    case JobEnd::RankFailed:
    case JobEnd::StartFailed:
    case JobEnd::NodeLost: stopped_text = others; break;
    case JobEnd::Interrupted:
      stopped_text = fmt::format("{} rank{}", stopped ? fmt::format("stopped {}", stopped) : "no running",
                                 stopped == 1 ? "" : "s");
      break;
    case JobEnd::TimedOut:
    case JobEnd::TimeLimit:  // the notes below say whose limit, in Slurm's words
      stopped_text = fmt::format("stopped {} rank{}", stopped, stopped == 1 ? "" : "s");
      break;
  }
  if (result.end != JobEnd::Completed)
    print_note(fmt::format("{}; {}", describe_job_end(result, plan, timeout_s), stopped_text));
  if (result.escaped_killed > 0)
    print_warning(fmt::format("found {} process{} of this job outside its ranks' process "
                              "groups (MUSTER_JOB_ID) and stopped {}",
                              result.escaped_killed, result.escaped_killed == 1 ? "" : "es",
                              result.escaped_killed == 1 ? "it" : "them"));
  for (const auto& note : result.notes) print_warning(note);
  for (const auto& s : result.stuck)
    print_warning(fmt::format("{}{} would not die after SIGKILL; muster exits without it",
                              s.description,
                              s.rank >= 0 ? fmt::format(" of rank {}", s.rank) : std::string()));
}

void report_attempts(const LaunchedJob& job) {
  const size_t n = job.attempts.size();
  print_note(fmt::format("{} attempt{}:", n, n == 1 ? "" : "s"));
  for (size_t number = 0; number < n; ++number) {
    const AttemptRecord& a = job.attempts[number];
    std::string line = fmt::format("  attempt {} at {:.1f} s on {}: {}", number + 1, a.started_s,
                                   fmt::join(a.hosts, ","), a.ended_by);
    if (!a.action.empty()) line += fmt::format("; {}", a.action);
    if (a.seconds_to_running) line += fmt::format("; ranks running again {:.2f} s after the failure", *a.seconds_to_running);
    print_note(line);
  }
  for (const auto& [host, why] : job.left_out) print_note(fmt::format("left out: {}: {}", host, why));
}

void print_attempts_json(const LaunchedJob& job) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t number = 0; number < job.attempts.size(); ++number) {
    const AttemptRecord& a = job.attempts[number];
    nlohmann::json e = {{"event", "attempt"}, {"attempt", number + 1}, {"restart_count", number},
                        {"started_s", a.started_s}, {"hosts", a.hosts}, {"end", job_end_name(a.end)},
                        {"ended_by", a.ended_by}, {"action", a.action},
                        {"seconds_to_running", a.seconds_to_running ? nlohmann::json(*a.seconds_to_running)
                                                                    : nlohmann::json(nullptr)}};
    events.push_back(std::move(e));
  }
  for (const auto& [host, why] : job.left_out) events.push_back({{"event", "left_out"}, {"host", host}, {"why", why}});
  nlohmann::json out = {{"events", events}, {"exit_code", job.result.exit_code()}};
  // ended_by and why carry a rank's or a node's own words: any bytes.
  print_out(report_json_text(std::move(out), -1) + "\n");
}

}  // namespace muster::cli
