#include "launcher/job/restarts.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "launcher/error.h"

namespace muster {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(SteadyTime from, SteadyTime to) { return std::chrono::duration<double>(to - from).count(); }

std::string signal_name(int signal) {
  if (const char* name = sigabbrev_np(signal)) return fmt::format("SIG{}", name);
  return fmt::format("signal {}", signal);
}

// Whose fault, after a failure: the nodes the attempt lost or could not start on (`faulty`),
// and those of its other `nodes` that fail a quick check now, added to `faulty`. Then spares
// for them, checked only when a node at fault needs one, as many as are needed (a restart in
// place uses none): a spare that fails its check is left out as a node would be, and those
// that pass head `spares`.
void check_nodes_and_spares(AttemptRunner& runner, const std::vector<size_t>& nodes, std::vector<size_t>& spares,
                            std::map<size_t, std::string>& faulty,
                            const std::function<void(size_t, const std::string&)>& leave_out) {
  std::vector<size_t> to_check;
  for (size_t n : nodes)
    if (!faulty.count(n)) to_check.push_back(n);
  for (auto& [node, why] : runner.check_nodes(to_check))
    if (std::find(nodes.begin(), nodes.end(), node) != nodes.end()) faulty[node] = why;
  size_t needed = 0;
  for (size_t n : nodes) needed += faulty.count(n);
  std::vector<size_t> healthy;
  while (healthy.size() < needed && !spares.empty()) {
    const size_t take = std::min(needed - healthy.size(), spares.size());
    const std::vector<size_t> candidates(spares.begin(), spares.begin() + long(take));
    spares.erase(spares.begin(), spares.begin() + long(take));
    const std::map<size_t, std::string> failed = runner.check_nodes(candidates);
    for (size_t n : candidates) {
      if (auto it = failed.find(n); it != failed.end()) leave_out(n, it->second);
      else healthy.push_back(n);
    }
  }
  spares.insert(spares.begin(), healthy.begin(), healthy.end());
}

}  // namespace

bool end_calls_for_restart(JobEnd end) {
  // A timeout, a time limit or Ctrl-C is someone's decision to stop the job, not a failure
  // to recover from.
  return end == JobEnd::RankFailed || end == JobEnd::StartFailed || end == JobEnd::NodeLost;
}

RestartedJob run_with_restarts(AttemptRunner& runner, std::vector<size_t> nodes, std::vector<size_t> spares,
                               int restarts, std::optional<SteadyTime> deadline) {
  RestartedJob job;
  const SteadyTime first_start = Clock::now();
  std::optional<SteadyTime> previous_failure;
  auto leave_out = [&](size_t node, const std::string& why) {
    job.left_out[node] = why;
    if (std::string told = runner.leave_out(node, why); !told.empty()) job.told.push_back(std::move(told));
  };
  // An error or Ctrl-C between attempts, or as one starts, ends the job with the attempt
  // before: its status is the job's, and the timeline keeps every attempt that ran.
  auto stopped_between = [&](const Error& e, const std::string& during) {
    if (const auto* interrupted = dynamic_cast<const Interrupted*>(&e))
      return fmt::format("none: interrupted by {} {}", signal_name(interrupted->signal()), during);
    const std::string said = fmt::format("{} ({})", e.what(), during);
    job.result.notes.push_back(fmt::format("no restart: {}", said));
    return fmt::format("none: {}", said);
  };
  for (int number = 0;; ++number) {
    AttemptRecord record;
    for (size_t n : nodes) record.hosts.push_back(runner.host(n));
    record.started_s = seconds_between(first_start, Clock::now());
    AttemptEnd end;
    if (number == 0) {
      end = runner.run_attempt(number, nodes, deadline);
    } else {
      try {
        end = runner.run_attempt(number, nodes, deadline);
      } catch (const Error& e) {
        job.attempts.back().action += "; " + stopped_between(e, fmt::format("in attempt {}", number + 1));
        return job;
      }
    }
    if (previous_failure && end.facts.ranks_running && !job.attempts.empty())
      job.attempts.back().seconds_to_running = seconds_between(*previous_failure, *end.facts.ranks_running);
    record.end = end.result.end;
    record.ended_by = end.ended_by;
    job.result = std::move(end.result);
    auto finish = [&](std::string action) {
      record.action = std::move(action);
      job.attempts.push_back(std::move(record));
      return job;
    };
    // No attempt follows: the nodes this one lost or could not start on are still left out
    // (named, and drained under --drain-bad), as they would have been before another.
    auto finish_leaving_out = [&](std::string action) {
      for (const auto& [node, why] : end.facts.faulty) leave_out(node, why);
      return finish(std::move(action));
    };
    if (!end_calls_for_restart(record.end)) return finish("");
    if (restarts == 0) return finish("");
    if (job.result.received_signal)
      return finish_leaving_out(fmt::format("none: interrupted by {} as it stopped",
                                            signal_name(job.result.received_signal)));
    if (number >= restarts)
      return finish_leaving_out(fmt::format("none: the {} {} spent", restarts,
                                            restarts == 1 ? "restart was" : "restarts were"));
    // Another attempt would be stopped as it starts.
    if (deadline && Clock::now() >= *deadline) return finish_leaving_out("none: the job's --timeout has passed");

    std::map<size_t, std::string> faulty = end.facts.faulty;
    try {
      check_nodes_and_spares(runner, nodes, spares, faulty, leave_out);
    } catch (const Error& e) {
      return finish_leaving_out(stopped_between(e, "while the nodes were checked"));
    }

    std::vector<std::string> moves;
    for (size_t k = 0; k < nodes.size(); ++k) {
      const auto it = faulty.find(nodes[k]);
      if (it == faulty.end()) continue;
      // Why, once, in the job's list of nodes left out: a lost node's words already ended the attempt.
      const std::string bad = fmt::format("{} left out", runner.host(nodes[k]));
      leave_out(nodes[k], it->second);
      if (spares.empty()) {
        const std::string said = fmt::format("{} was left out ({}) and no spare node was left; the job ends",
                                             runner.host(nodes[k]), it->second);
        job.result.notes.push_back(said);
        for (size_t rest = k + 1; rest < nodes.size(); ++rest)  // named (and drained) all the same
          if (auto more = faulty.find(nodes[rest]); more != faulty.end()) leave_out(nodes[rest], more->second);
        return finish(fmt::format("none: {}, no spare was left", bad));
      }
      moves.push_back(fmt::format("{}; its ranks moved to {}", bad, runner.host(spares.front())));
      nodes[k] = spares.front();
      spares.erase(spares.begin());
    }
    record.action = (moves.empty() ? "restarted in place: no node at fault" : fmt::format("{}", fmt::join(moves, "; ")));
    // The checks take up to their own deadline: the job's may have passed meanwhile.
    if (deadline && Clock::now() >= *deadline)
      return finish(record.action + "; not started: the job's --timeout passed while the nodes were checked");
    previous_failure = end.facts.failure_seen.value_or(Clock::now());
    job.attempts.push_back(std::move(record));
  }
}

void set_spares(ClusterSpec& cluster, int count) {
  const std::string where = cluster.source.empty() ? "the cluster" : cluster.source;
  if (count != 0) {
    if (cluster.is_this_machine)
      throw Error(ErrorKind::Usage, "--spares needs a cluster of several nodes (-H, --hostfile or -f); "
                                    "this machine alone has none to spare");
    if (count < 0 || size_t(count) >= cluster.nodes.size())
      throw Error(ErrorKind::Usage,
                  fmt::format("--spares {} leaves no node of the {} in {} to run the job; give fewer spares than nodes",
                              count, cluster.nodes.size(), where));
    for (size_t i = cluster.nodes.size() - size_t(count); i < cluster.nodes.size(); ++i) cluster.nodes[i].spare = true;
  }
  if (!cluster.nodes.empty() &&
      std::all_of(cluster.nodes.begin(), cluster.nodes.end(), [](const NodeSpec& n) { return n.spare; }))
    throw Error(ErrorKind::Config,
                fmt::format("every node of {} is a spare: none is left to run the job; take 'spare: true' off "
                            "the nodes that run it",
                            where));
}

int spares_beyond(const ClusterSpec& cluster, int nodes) {
  const std::string where = cluster.source.empty() ? "the cluster" : cluster.source;
  if (nodes < 1 || size_t(nodes) > cluster.nodes.size())
    throw Error(ErrorKind::Usage, fmt::format("--nodes {}: {} has {} node{}; give 1 to {}", nodes, where,
                                              cluster.nodes.size(), cluster.nodes.size() == 1 ? "" : "s",
                                              cluster.nodes.size()));
  return int(cluster.nodes.size()) - nodes;
}

std::pair<std::vector<size_t>, std::vector<size_t>> working_and_spare_nodes(const ClusterSpec& cluster) {
  std::pair<std::vector<size_t>, std::vector<size_t>> out;
  for (size_t i = 0; i < cluster.nodes.size(); ++i) (cluster.nodes[i].spare ? out.second : out.first).push_back(i);
  return out;
}

}  // namespace muster
