#include "cli/job_report.h"

#include <cstring>

#include <fmt/format.h>

#include "cli/terminal_output.h"

namespace muster::cli {
namespace {

std::string describe_rank(const RankPlan& plan, int rank) {
  return fmt::format("rank {} ({})", rank,
                     rank >= 0 && rank < plan.world_size() ? plan.ranks[size_t(rank)].host : "?");
}

}  // namespace

void report_job_end(const LaunchedJob& job, double timeout_s) {
  const JobResult& result = job.result;
  const RankPlan& plan = job.plan;
  int stopped = 0;
  for (const auto& r : result.ranks)  // a rank that aborted the job is no other rank stopped
    stopped += r.stopped_by_teardown && !(result.aborted && result.aborted->rank == r.rank);
  const std::string others = fmt::format("stopped {} other rank{}", stopped, stopped == 1 ? "" : "s");
  switch (result.end) {
    case JobEnd::Completed: break;
    case JobEnd::RankFailed:
      if (result.aborted) {
        print_note(fmt::format("{}; {}", result.aborted->said, others));
        break;
      }
      for (const auto& r : result.ranks)
        if (r.rank == result.first_failed_rank && r.status)
          print_note(fmt::format("{} {}; {}", describe_rank(plan, r.rank), r.status->describe(), others));
      break;
    case JobEnd::StartFailed:
      print_note(fmt::format("{} could not start: {}; {}",
                             describe_rank(plan, result.first_failed_rank.value_or(0)),
                             result.start_error, others));
      break;
    case JobEnd::Interrupted:
      print_note(fmt::format("interrupted by SIG{}; {} rank{}", sigabbrev_np(result.received_signal),
                             stopped ? fmt::format("stopped {}", stopped) : "no running",
                             stopped == 1 ? "" : "s"));
      break;
    case JobEnd::TimedOut:
      print_note(fmt::format("the job ran past --timeout {}s; stopped {} rank{}",
                             timeout_s, stopped, stopped == 1 ? "" : "s"));
      break;
    case JobEnd::TimeLimit:  // the notes below say whose limit, in Slurm's words
      print_note(fmt::format("Slurm time limit: the job was ended at its time limit; stopped {} rank{}",
                             stopped, stopped == 1 ? "" : "s"));
      break;
    case JobEnd::NodeLost:
      print_note(fmt::format("{} was on a node that was lost; {}",
                             describe_rank(plan, result.first_failed_rank.value_or(0)), others));
      break;
  }
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

}  // namespace muster::cli
