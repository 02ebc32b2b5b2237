#include "launcher/job/session_job.h"

#include <algorithm>
#include <climits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "launcher/cluster/hostlist.h"
#include "launcher/error.h"
#include "launcher/job/control_socket.h"
#include "launcher/json_fields.h"
#include "launcher/local/pmix_status.h"
#include "launcher/local/rank_libraries.h"
#include "launcher/remote/agent_protocol.h"
#include "launcher/remote/launch_spec.h"

namespace muster {
namespace {

using Clock = std::chrono::steady_clock;
using Milliseconds = std::chrono::milliseconds;

// One job over the session, from the specs sent to the last node's report.
class SessionRun {
 public:
  SessionRun(ClusterSession& session, const RankPlan& plan, const LaunchRequest& request,
             const TeardownPolicy& policy, JobOutput& output, const std::vector<int>& interrupt_fds,
             SessionJobState* job_state)
      : session_(session), plan_(plan), request_(request), policy_(policy), output_(output),
        interrupt_fds_(interrupt_fds), job_(job_state ? *job_state : own_job_), status_(size_t(plan.world_size())),
        stopped_(status_.size(), false) {}

  AttemptFacts facts_;

  JobResult run() {
    check_every_node_is_usable();
    open_control_socket();
    send_specs();
    try {
      supervise_until_every_node_reported();
    } catch (...) {
      abandon_unreported_nodes();
      answer_waiting_clients("");
      throw;
    }
    answer_waiting_clients("");
    warn_of_nodes_that_went_home(/*every_node_heard=*/true);
    record_outcomes();
    blame_the_command_when_no_node_started();
    return std::move(result_);
  }

 private:
  // Nothing starts when a node that holds ranks was lost earlier in the session.
  void check_every_node_is_usable() {
    std::vector<std::string> problems;
    for (const auto& node : plan_.nodes)
      if (!node.ranks.empty() && !session_.usable(size_t(node.node_rank)))
        problems.push_back(session_.why_unusable(size_t(node.node_rank)));
    if (problems.empty()) return;
    problems.push_back("nothing was started");
    throw Error(ErrorKind::Runtime, problems);
  }

  // Each node gets its part of the plan; the agents start their ranks at once.
  void send_specs() {
    id_ = session_.new_id();
    NodeLaunchSpec spec{{}, request_, policy_};  // copied once: node_env holds every node's
    for (const auto& node : plan_.nodes) {
      if (node.ranks.empty()) continue;
      reported_[size_t(node.node_rank)] = false;
      spec.node = node_view(plan_, node.node_rank);
      session_.send(size_t(node.node_rank), {FrameKind::Spec, id_, to_json(spec)});
    }
    if (policy_.timeout) deadline_ = Clock::now() + *policy_.timeout;
  }

  // Output, exits, interrupts, the timeout and silent nodes; one teardown for every node.
  void supervise_until_every_node_reported() {
    last_line_ = Clock::now();
    while (!every_node_reported()) {
      for (ClusterSession::NodeEvent& e : session_.take_events(Milliseconds(100))) handle(e);
      warn_of_nodes_that_went_home(/*every_node_heard=*/false);
      output_.flush();
      read_interrupts();
      check_deadline();
      check_stall();
      check_control_requests();
      check_stacks();
      check_silent_nodes();
      if (give_up_at_ && Clock::now() >= *give_up_at_) {
        give_up_on_unreported_nodes();
        break;
      }
    }
  }

  // A start that failed where no node started its ranks (a typo in the command, a script or
  // --chdir that no node has) is the command's fault, not the nodes': none is left out for it,
  // and a restart is in place. Only beside a node that started the same ranks is a node that
  // could not start them at fault. (A node whose agent itself failed stays at fault.)
  void blame_the_command_when_no_node_started() {
    if (!started_ranks_) return;
    for (const auto& [node, why] : could_not_start_) facts_.faulty.emplace(node, why);
  }

  void record_outcomes() {
    for (size_t r = 0; r < status_.size(); ++r) {
      RankOutcome o;
      o.rank = int(r);
      o.status = status_[r];
      o.stopped_by_teardown = stopped_[r];
      result_.ranks.push_back(o);
    }
  }

  // --- events --------------------------------------------------------------------------

  void handle(ClusterSession::NodeEvent& e) {
    if (!e.frame) return on_link_ended(e.node, e.why_ended);
    if (!reported_.count(e.node)) return;  // a node without ranks in this run
    Frame& f = *e.frame;
    try {
      switch (f.kind) {
        case FrameKind::Bound: {
          const NodeBound bound = node_bound_from_json(f.payload);
          for (const auto& [rank, report] : bound.ranks) output_.rank_bound(rank, report);
          bound_.insert(e.node);
          if (!facts_.ranks_running && bound_.size() == reported_.size()) facts_.ranks_running = Clock::now();
          if (bound.went_home) went_home_.push_back(host(e.node));
          break;
        }
        case FrameKind::Out: on_line(e.node, f.rank, OutputStream::Stdout, f.payload); break;
        case FrameKind::Err: on_line(e.node, f.rank, OutputStream::Stderr, f.payload); break;
        case FrameKind::Exit: on_exit(e.node, f.rank, f.payload); break;
        case FrameKind::Done:
          if (f.rank == id_) on_done(e.node, f.payload);
          break;
        case FrameKind::Fail:
          if (f.rank == id_ || f.rank < 0) on_fail(e.node, f.payload);
          break;
        case FrameKind::Fence:
          if (f.rank == id_) on_fence(e.node, decode_fence(f.payload));
          break;
        case FrameKind::Fetch:
          if (f.rank == id_) on_fetch(e.node, decode_fetch(f.payload));
          break;
        case FrameKind::Fetched:
          if (f.rank == id_) on_fetched(decode_fetched(f.payload));
          break;
        case FrameKind::Answer: on_stacks(e.node, f.rank, f.payload); break;
        default: break;
      }
    } catch (const Error& bad) {  // every payload reader throws Error alone
      result_.notes.push_back(fmt::format("{} sent a malformed message: {}", host(e.node), bad.what()));
    }
  }

  void on_line(size_t node, int rank, OutputStream stream, const std::string& text) {
    if (!holds_rank(node, rank)) return;
    last_line_ = Clock::now();
    output_.line(rank, stream, text);
  }

  void on_exit(size_t node, int rank, const std::string& payload) {
    if (!holds_rank(node, rank)) return;
    const ExitStatus s = exit_from_json(payload);
    status_[size_t(rank)] = s;
    output_.rank_ended(rank, s);
    if (s.success() || tearing_down_) return;
    if (!result_.first_failed_rank) result_.first_failed_rank = rank;
    result_.end = JobEnd::RankFailed;
    if (!rank_gave_up_on_a_peer(policy_, s)) stop_everything(JobEnd::RankFailed);
    else if (!settle_until_) settle_until_ = Clock::now() + policy_.settle;
  }

  // A node's part of an MPI fence: once every node of the run gave its part of it, each gets
  // all of them (PMIx's modex, PMI-1's puts), as srun's pmix plugin and Hydra gather them.
  void on_fence(size_t node, FencePart part) {
    int& expected = next_fence_[{node, part.protocol}];
    if (part.number != expected)
      throw Error(ErrorKind::Runtime, fmt::format("its {} fence {} came where fence {} was due", part.protocol,
                                                  part.number + 1, expected + 1));
    ++expected;
    Fence& fence = fences_[{part.protocol, part.number}];
    // Bounded as it grows: every node's part goes back to every node in one frame, which
    // kMaxHeadFramePayload leaves room for, length lines included.
    fence.bytes += part.bytes.size();
    fence.parts[node] = std::move(part.bytes);
    if (fence.bytes > kMaxFenceBytes) {
      fences_.erase({part.protocol, part.number});
      if (tearing_down_) return;
      result_.notes.push_back(fmt::format("the nodes' data for MPI's {} fence {} came to more than the {} MiB "
                                          "muster carries in one fence",
                                          part.protocol, part.number + 1, kMaxFenceBytes >> 20));
      return stop_everything(JobEnd::RankFailed);
    }
    if (fence.parts.size() < reported_.size()) return;
    std::vector<std::string> parts;
    for (auto& [n, bytes] : fence.parts) parts.push_back(std::move(bytes));
    fences_.erase({part.protocol, part.number});
    std::vector<size_t> waiting;
    for (const auto& [n, reported] : reported_)
      if (!reported && session_.usable(n)) waiting.push_back(n);
    session_.send_to_each(waiting, {FrameKind::Fenced, id_, encode_fenced(part.protocol, part.number, parts)});
  }

  // A rank on `node` wants another rank's data that no fence carried (PMIx's direct modex):
  // the node that holds that rank is asked, and its answer goes back.
  void on_fetch(size_t node, std::pair<int, int> fetch) {
    const auto [request, rank] = fetch;
    if (rank < 0 || rank >= plan_.world_size() || fetches_.size() >= kMostFetchesWaiting)
      return session_.send(node, {FrameKind::Fetched, id_, encode_fetched(request, kPmixErrNotFound, "")});
    const size_t holder = size_t(plan_.ranks[size_t(rank)].node_rank);
    if (!reported_.count(holder) || reported_[holder] || !session_.usable(holder))
      return session_.send(node, {FrameKind::Fetched, id_, encode_fetched(request, kPmixErrUnreach, "")});
    const int ours = next_fetch_++;
    fetches_[ours] = {node, request};
    session_.send(holder, {FrameKind::Fetch, id_, encode_fetch(ours, rank)});
  }

  void on_fetched(std::tuple<int, int, std::string> answer) {
    auto& [ours, status, data] = answer;
    const auto it = fetches_.find(ours);
    if (it == fetches_.end()) return;
    const auto [node, request] = it->second;
    fetches_.erase(it);
    if (session_.usable(node)) session_.send(node, {FrameKind::Fetched, id_, encode_fetched(request, status, data)});
  }

  // At the timeout: each fence some nodes entered and others did not, and those others.
  void name_unfinished_fences() {
    for (const auto& [key, fence] : fences_) {
      std::vector<std::string> missing;
      for (const auto& [node, reported] : reported_)
        if (!fence.parts.count(node))
          missing.push_back(fmt::format("{} (rank{} {})", host(node), plan_.nodes[node].ranks.size() == 1 ? "" : "s",
                                        fmt::join(plan_.nodes[node].ranks, ", ")));
      result_.notes.push_back(fmt::format("at the timeout the ranks were waiting in {} fence {}: not every rank of "
                                          "{} had entered it",
                                          key.first == "pmi1" ? "PMI's" : "PMIx's", key.second + 1,
                                          fmt::join(missing, ", ")));
    }
  }

  void on_done(size_t node, const std::string& payload) {
    reported_[node] = true;
    const NodeRunReport done = node_run_report_from_json(payload);
    if (done.aborted && !result_.aborted) {
      // The rank's own words and code are the cause, unless a timeout or a signal came first.
      result_.aborted = done.aborted;
      result_.first_failed_rank = done.aborted->rank;
      stop_everything(JobEnd::RankFailed);
    }
    result_.escaped_killed = int(std::min<long>(long(result_.escaped_killed) + done.escaped_killed, INT_MAX));
    if (!done.start_error.empty()) {
      result_.start_error = fmt::format("{}: {}", host(node), done.start_error);
      could_not_start_.emplace(node, "its ranks could not start: " + done.start_error);
      if (result_.end == JobEnd::RankFailed || result_.end == JobEnd::Completed)
        result_.end = JobEnd::StartFailed;
    } else {
      started_ranks_ = true;
    }
    for (const auto& note : done.notes) result_.notes.push_back(fmt::format("{}: {}", host(node), note));
    for (const auto& s : done.stuck) result_.stuck.push_back({s.rank, fmt::format("{}: {}", host(node), s.description)});
  }

  void on_fail(size_t node, const std::string& why) {
    reported_[node] = true;
    result_.notes.push_back(fmt::format("{}: the agent failed: {}", host(node), why));
    if (tearing_down_) return;
    result_.start_error = fmt::format("{}: {}", host(node), why);
    facts_.faulty[node] = fmt::format("its agent failed: {}", why);
    result_.first_failed_rank = plan_.nodes[node].ranks.front();
    stop_everything(JobEnd::StartFailed);
  }

  // The node's channel ended, or it fell silent: its ranks are out of reach. Its agent
  // stops them on its own side when it notices (the channel closed, or the head fell silent).
  void node_lost(size_t node, const std::string& why) {
    const bool in_run = reported_.count(node) && !reported_[node];
    const std::string what = fmt::format("lost contact with {}: {}", host(node), why);
    session_.lose(node, what);
    if (!in_run) return;
    reported_[node] = true;
    facts_.faulty.emplace(node, why);
    std::optional<int> running;
    for (int rank : plan_.nodes[node].ranks)
      if (!status_[size_t(rank)] && !running) running = rank;
    if (!running) return;
    result_.notes.push_back(what);
    if (!tearing_down_) {
      result_.first_failed_rank = *running;
      stop_everything(JobEnd::NodeLost);
    }
  }
  void on_link_ended(size_t node, const std::string& why) { node_lost(node, why); }

  // --- deadlines and requests ----------------------------------------------------------

  void read_interrupts() {
    while (int signal_number = pending_interrupt(interrupt_fds_)) {
      if (!tearing_down_) {
        result_.received_signal = signal_number;
        stop_everything(JobEnd::Interrupted);
      } else if (!result_.received_signal) {
        // Ctrl-C while a failure stops the job: the end stays the failure's, but the user has
        // said stop, so no restart follows it.
        result_.received_signal = signal_number;
      } else {
        send_stop();  // a second Ctrl-C: every agent sends SIGKILL at once
      }
    }
  }

  // At the timeout the ranks' stacks are read first: the teardown follows the report.
  void check_deadline() {
    if (settle_until_ && Clock::now() >= *settle_until_) stop_everything(JobEnd::RankFailed);
    if (deadline_ && Clock::now() >= *deadline_ && !tearing_down_ && !stop_after_stacks_) {
      stop_after_stacks_ = true;
      read_stacks(StacksWhen::Timeout);
    }
  }

  void time_out() {
    name_unfinished_fences();
    stop_everything(JobEnd::TimedOut);
  }

  // Once per job, when no rank has written a line for --stall: the job goes on.
  void check_stall() {
    if (!policy_.stall || job_.stall_read || tearing_down_ || Clock::now() - last_line_ < *policy_.stall) return;
    job_.stall_read = true;
    read_stacks(StacksWhen::Stall);
  }

  // --- stacks ----------------------------------------------------------------------------

  // Where `muster stacks` finds the job. Without it the job runs as well: it says why.
  void open_control_socket() {
    if (job_.control_tried) return;  // an earlier attempt's: it says what it did
    job_.control_tried = true;
    std::vector<std::string> hosts;
    for (const auto& node : plan_.nodes)
      if (!node.ranks.empty()) hosts.push_back(host(size_t(node.node_rank)));
    try {
      job_.control = std::make_unique<JobControlSocket>(request_.job.job_id,
                                                        job_listing(request_.argv, plan_.world_size(), hosts));
    } catch (const Error& e) {
      output_.launch_warning(fmt::format("'muster stacks' cannot reach this job: {}", e.what()));
    }
  }

  void check_control_requests() {
    if (!job_.control) return;
    while (auto client = job_.control->take_stacks_request()) {
      clients_.push_back(*client);
      read_stacks(StacksWhen::Request);
    }
  }

  void answer_waiting_clients(const std::string& text) {
    for (int client : clients_) JobControlSocket::answer(client, text);
    clients_.clear();
  }

  // Asks every node still running ranks for their stacks; the report follows once all
  // answered or kStacksWait passed. One reading at a time: a second request joins it.
  void read_stacks(StacksWhen when) {
    if (stacks_) {
      if (when != StacksWhen::Request) stacks_->report.when = when;  // so that it is printed
      return;
    }
    stacks_.emplace();
    stacks_->report.when = when;
    stacks_->until = Clock::now() + kStacksWait;
    const std::string ask = nlohmann::json{{"op", "stacks"}, {"limit_ms", kStacksReadLimit.count()}}.dump();
    for (const auto& [node, reported] : reported_)
      if (!reported && session_.usable(node)) {
        const int id = session_.new_id();
        stacks_->asked[id] = node;
        session_.send(node, {FrameKind::Ask, id, ask});
      }
    if (stacks_->asked.empty()) finish_stacks();
  }

  void on_stacks(size_t node, int id, const std::string& payload) {
    if (!stacks_ || !stacks_->asked.count(id)) return;
    stacks_->asked.erase(id);
    try {
      MergedStacks more = merged_stacks_from_json(payload);
      // Written as each node answers: the head never holds every node's dumps at once.
      keep_flight_recorder_dumps(more.flight_recorder, flight_recorder_dir(request_.job.job_id));
      merge_stacks(stacks_->report.stacks, std::move(more), host(node));
    } catch (const Error& e) {
      stacks_->report.unanswered.push_back(fmt::format("{} ({})", host(node), e.what()));
    }
    if (stacks_->asked.empty()) finish_stacks();
  }

  void check_stacks() {
    if (stacks_ && Clock::now() >= stacks_->until) finish_stacks();
  }

  void finish_stacks() {
    StackReport report = std::move(stacks_->report);
    for (const auto& [id, node] : stacks_->asked) report.unanswered.push_back(host(node));
    stacks_.reset();
    for (const auto& r : plan_.ranks) report.host_of_rank.push_back(r.host);
    // Ranks that ended before they were asked about: the head heard how.
    std::set<int> read;
    for (const auto& r : report.stacks.ranks) read.insert(r.rank);
    for (size_t r = 0; r < status_.size(); ++r)
      if (status_[r] && !read.count(int(r))) report.ended.emplace_back(int(r), status_[r]->describe());
    for (const auto& r : report.stacks.ranks)
      if (r.state == ProcessStacks::State::Gone && status_[size_t(r.rank)])
        report.ended.emplace_back(r.rank, status_[size_t(r.rank)]->describe());
    answer_waiting_clients(to_json(report));
    if (!tearing_down_ && report.when != StacksWhen::Request) output_.stacks(report);
    if (stop_after_stacks_ && !tearing_down_) time_out();
  }

  void check_silent_nodes() {
    for (auto [node, seconds] : session_.silent_nodes())
      node_lost(node, silence_text(seconds) + "; its agent stops its ranks on its own");
  }

  void stop_everything(JobEnd why) {
    if (tearing_down_) return;
    tearing_down_ = true;
    facts_.failure_seen = Clock::now();
    result_.end = why;
    for (size_t r = 0; r < status_.size(); ++r) stopped_[r] = !status_[r].has_value();
    send_stop();
    // Agents escalate to SIGKILL after the grace period and name what survives; past that
    // (and a margin for the network), the head stops waiting for them.
    give_up_at_ = Clock::now() + policy_.grace + policy_.kill_wait + std::chrono::seconds(5);
  }

  void send_stop() {
    for (auto& [node, reported] : reported_)
      if (!reported && session_.usable(node))
        session_.send(node, {FrameKind::Stop, id_, ""});
  }

  // The way out when an exception unwinds through the run (an output sink that threw):
  // every node still running gets two stops (SIGKILL at once) and its channel closed, which
  // its agent also takes for a stop. The session is not used for them again.
  void abandon_unreported_nodes() noexcept {
    try {
      for (auto& [node, reported] : reported_) {
        if (reported || !session_.usable(node)) continue;
        for (int i = 0; i < 2; ++i) session_.send(node, {FrameKind::Stop, id_, ""});
        session_.lose(node, fmt::format("{} was stopped when the head gave up on a job", host(node)));
      }
    } catch (...) {
      // Already on the way out with an exception.
    }
  }

  void give_up_on_unreported_nodes() {
    for (auto& [node, reported] : reported_) {
      if (reported) continue;
      const std::string why = fmt::format("{} did not confirm that its ranks stopped; its agent "
                                          "stops them once the connection closes", host(node));
      result_.notes.push_back(why);
      session_.lose(node, why);
    }
  }

  // One warning for every node whose ranks start in $HOME, once each node has said where its
  // ranks start (or has ended without saying): a thousand nodes without the caller's
  // directory are one line, not a thousand.
  void warn_of_nodes_that_went_home(bool every_node_heard) {
    if (warned_home_ || went_home_.empty()) return;
    if (!every_node_heard && !std::all_of(reported_.begin(), reported_.end(), [&](const auto& r) {
          return r.second || bound_.count(r.first);
        }))
      return;
    warned_home_ = true;
    output_.launch_warning(fmt::format("'{}' cannot be entered on {}: the ranks there start in $HOME; "
                                       "--chdir DIR names a directory every node has",
                                       request_.workdir.value_or(""), fold_hostlist(went_home_)));
  }

  bool every_node_reported() const {
    return std::all_of(reported_.begin(), reported_.end(), [](const auto& r) { return r.second; });
  }
  bool holds_rank(size_t node, int rank) const {
    const auto& ranks = plan_.nodes[node].ranks;
    return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
  }
  const std::string& host(size_t node) const { return session_.host(node); }

  ClusterSession& session_;
  const RankPlan& plan_;
  const LaunchRequest& request_;
  const TeardownPolicy& policy_;
  JobOutput& output_;
  const std::vector<int>& interrupt_fds_;
  SessionJobState own_job_;  // when this run is the whole job
  SessionJobState& job_;
  int id_ = 0;
  JobResult result_;
  std::vector<std::optional<ExitStatus>> status_;
  std::vector<bool> stopped_;           // still running when teardown began
  std::map<size_t, bool> reported_;     // the nodes of this run, and whether each has ended
  std::set<size_t> bound_;              // the nodes that said where their ranks start
  // The nodes whose agent said their ranks could not start, with why: at fault once the run
  // ends, if another node's started (see blame_the_command_when_no_node_started).
  std::map<size_t, std::string> could_not_start_;
  bool started_ranks_ = false;  // a node said its ranks had all started (its Done had no start error)
  std::vector<std::string> went_home_;  // hosts whose ranks start in $HOME instead
  bool warned_home_ = false;
  bool tearing_down_ = false;
  std::optional<Clock::time_point> deadline_, give_up_at_;
  // Stacks being read: what came so far, which asks are still out (by id), and until when.
  struct StacksReading {
    StackReport report;
    std::map<int, size_t> asked;
    Clock::time_point until;
  };
  std::optional<StacksReading> stacks_;
  std::vector<int> clients_;  // `muster stacks` waiting for the reading under way
  bool stop_after_stacks_ = false;  // the timeout came: teardown once the stacks are in
  Clock::time_point last_line_;
  // What the head waits for every node's answer: a node's kStacksReadLimit, and the network
  // and a slow node's unwinding on top.
  static constexpr Milliseconds kStacksWait{8000};
  std::optional<Clock::time_point> settle_until_;  // a rank failed: teardown begins then
  // MPI fences some nodes have entered, by protocol and number: each node's part.
  struct Fence {
    std::map<size_t, std::string> parts;
    size_t bytes = 0;
  };
  std::map<std::pair<std::string, int>, Fence> fences_;
  std::map<std::pair<size_t, std::string>, int> next_fence_;  // by node and protocol
  // Fetches on their way to the node that holds the rank: by the head's number, who asked
  // and with what number of its own.
  std::map<int, std::pair<size_t, int>> fetches_;
  int next_fetch_ = 0;
  static constexpr size_t kMostFetchesWaiting = size_t(1) << 20;
};

}  // namespace

JobResult run_over_session(ClusterSession& session, const RankPlan& plan, const LaunchRequest& request,
                           const TeardownPolicy& policy, JobOutput& output,
                           const std::vector<int>& interrupt_fds, AttemptFacts* facts,
                           SessionJobState* job_state) {
  SessionRun run(session, plan, request, policy, output, interrupt_fds, job_state);
  JobResult result = run.run();
  if (facts) *facts = std::move(run.facts_);
  // A scheduler that ended the agents (scancel, a time limit, a failed node) signals the
  // ranks or loses a node, and says so a moment later: its words are the cause, and a time
  // limit is a timeout. A rank that just failed on its own costs no wait.
  const bool ended_from_outside =
      result.end == JobEnd::NodeLost ||
      std::any_of(result.ranks.begin(), result.ranks.end(), [](const RankOutcome& r) {
        return r.status && r.status->kind == ExitStatus::Kind::Signaled && !r.stopped_by_teardown;
      });
  if (result.end != JobEnd::Completed && result.end != JobEnd::Interrupted) {
    auto outside = session.outside_end(std::chrono::milliseconds(ended_from_outside ? 1000 : 0));
    if (!outside.note.empty()) result.notes.push_back(outside.note);
    if (outside.time_limit) result.end = JobEnd::TimeLimit;
  }
  return result;
}

}  // namespace muster
