#include "launcher/json_fields.h"
#include "launcher/remote/session.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/remote/agent_protocol.h"
#include "launcher/thread.h"

namespace muster {

using Clock = std::chrono::steady_clock;
using Milliseconds = std::chrono::milliseconds;

SshTarget ssh_target_of(const NodeSpec& node) { return {node.host, node.address, node.ssh}; }

namespace {

// How often each side says it is alive; the timeout is several of these.
constexpr Milliseconds kBeatInterval{1000};

// A link's thread waits at most this long before it looks again at what there is to send:
// a wake-up that went missing costs no more than this.
constexpr Milliseconds kLinkPollSlice{50};

int64_t now_ns() { return Clock::now().time_since_epoch().count(); }

// Returns the signal number when one of `fds` has a byte (a stop request), else 0.
int pending_interrupt(const std::vector<int>& fds) {
  for (int fd : fds) {
    unsigned char signal_number = 0;
    if (read(fd, &signal_number, 1) == 1) return signal_number;
  }
  return 0;
}

// What a link's thread tells the head's thread: a frame, or that the link ended.
struct LinkEvent {
  size_t node = 0;
  std::optional<Frame> frame;  // unset: the link ended
  std::string why_ended;
  std::chrono::system_clock::time_point at;  // when it was read
};

}  // namespace

// Events from every link, bounded: when the head falls behind (its stdout is slow), the
// links stop reading, the agents' writes wait, and so do their ranks. Nothing piles up.
struct ClusterSession::Events {
  static constexpr size_t kMaxBytes = size_t(16) << 20;

  void push(LinkEvent e) {
    std::lock_guard lock(mutex);
    bytes += e.frame ? e.frame->payload.size() : 0;
    queue.push_back(std::move(e));
    ready.notify_one();
  }
  bool has_room() {
    std::lock_guard lock(mutex);
    return bytes < kMaxBytes;
  }
  std::deque<LinkEvent> take(Milliseconds wait) {
    std::unique_lock lock(mutex);
    ready.wait_for(lock, wait, [&] { return !queue.empty(); });
    bytes = 0;
    return std::exchange(queue, {});
  }

  std::mutex mutex;
  std::condition_variable ready;
  std::deque<LinkEvent> queue;
  size_t bytes = 0;
};

// A node's connection, its agent's channel, and the thread that alone drives them once the
// session is open (libssh sessions are not thread-safe).
struct ClusterSession::Link {
  std::string host;
  std::unique_ptr<SshConnection> connection;
  std::unique_ptr<RemoteCommand> agent;
  FrameReader reader{kMaxAgentFramePayload};
  std::string agent_stderr;
  std::thread io;
  int wake[2] = {-1, -1};       // a byte: there is something to send, or the link closes
  std::mutex mutex;             // guards outgoing and closing
  std::string outgoing;         // frames to send
  bool closing = false;
  std::atomic<int64_t> last_heard_ns{0};

  Link() {
    if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0)
      throw Error(ErrorKind::Runtime, "cannot create a pipe");
  }
  ~Link() {
    close_channel(false);
    if (io.joinable()) io.join();
    agent.reset();
    connection.reset();
    for (int fd : wake) close(fd);
  }
  void send(const Frame& frame) {
    std::lock_guard lock(mutex);
    outgoing += encode_frame(frame);
    [[maybe_unused]] auto n = write(wake[1], "s", 1);
  }
  // Stops the link's thread; with `say_bye`, the agent is told the session is over first.
  void close_channel(bool say_bye) {
    std::lock_guard lock(mutex);
    if (closing) return;
    if (say_bye) outgoing += encode_frame({FrameKind::Bye, -1, ""});
    closing = true;
    [[maybe_unused]] auto n = write(wake[1], "c", 1);
  }
  void heard() { last_heard_ns = now_ns(); }
};

namespace {

// Drives one link until the session closes it or the channel ends: sends what is queued and
// a heartbeat each second, forwards every frame received (heartbeats only count as heard),
// and reports how the link ended.
void drive_link(ClusterSession::Link& link, size_t node, ClusterSession::Events& events) {
  auto next_beat = Clock::now();
  std::string why = "the connection closed";
  try {
    for (;;) {
      // 1. What is queued, and a heartbeat when one is due.
      std::string outgoing;
      bool closing;
      {
        std::lock_guard lock(link.mutex);
        outgoing.swap(link.outgoing);
        closing = link.closing;
      }
      if (!closing && Clock::now() >= next_beat) {
        outgoing += encode_frame({FrameKind::Beat, -1, ""});
        next_beat = Clock::now() + kBeatInterval;
      }
      if (!outgoing.empty()) link.agent->write(outgoing);
      if (closing) return;

      // 2. What has arrived, unless the head is behind: then the node waits (flow control),
      //    and the silence is the head's own, not the node's.
      const bool room = events.has_room();
      std::string in;
      bool open = true;
      if (room) {
        open = link.agent->read(in, link.agent_stderr, Milliseconds(0));
        if (link.agent_stderr.size() > kKeptStderr)  // a ring: its last words are kept
          link.agent_stderr.erase(0, link.agent_stderr.size() - kKeptStderr);
      } else {
        link.heard();
      }
      if (!in.empty()) {
        link.heard();
        link.reader.feed(in);
        while (auto frame = link.reader.next())
          if (frame->kind != FrameKind::Beat)
            events.push({node, std::move(*frame), "", std::chrono::system_clock::now()});
      }
      if (!open) break;
      if (!in.empty()) continue;  // there may be more

      // 3. Wait for the node, for something to send, or for the next heartbeat.
      const int channel_fd = room ? link.agent->wait_fd() : -1;
      auto wait = std::min(kLinkPollSlice, std::chrono::duration_cast<Milliseconds>(
                                               next_beat - Clock::now()) + Milliseconds(1));
      if (channel_fd < 0 && room) wait = std::min(wait, Milliseconds(5));  // no fd: poll reads
      pollfd fds[2] = {{link.wake[0], POLLIN, 0}, {channel_fd, POLLIN, 0}};
      poll(fds, channel_fd >= 0 ? 2 : 1, int(std::max<long>(0, wait.count())));
      char drain[64];
      while (read(link.wake[0], drain, sizeof drain) > 0) {}
    }
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (!link.agent_stderr.empty())  // the agent's last words, which say why it ended
    why += ": " + link.agent_stderr.substr(link.agent_stderr.size() - std::min<size_t>(300, link.agent_stderr.size()));
  events.push({node, std::nullopt, why, std::chrono::system_clock::now()});
}

// Everything the opening shares with its threads, which may outlive an interrupted open().
struct Opening {
  std::shared_ptr<AgentLauncher> launcher;
  SessionOptions options;
  AgentStartOptions start;
  std::vector<std::unique_ptr<ClusterSession::Link>> links;
  std::vector<NodeHello> hellos;
  std::vector<NodeReach> reach;
  std::atomic<bool> cancelled{false};
  int done[2] = {-1, -1};
  ~Opening() {
    for (int fd : done) if (fd >= 0) close(fd);
  }
};

// Starts one node's agent through the launcher and keeps what came of it.
void open_node(Opening& o, size_t i) {
  ClusterSession::Link& link = *o.links[i];
  NodeReach& reach = o.reach[i];
  try {
    NodeAgent started = o.launcher->start(i, o.start, o.cancelled);
    link.connection = std::move(started.connection);
    reach.timings = started.timings;
    reach.command_rtt_ms = started.agent.command_rtt_ms;
    link.agent = std::move(started.agent.command);
    link.reader = std::move(started.agent.reader);
    link.agent_stderr = std::move(started.agent.stderr_text);
    o.hellos[i] = std::move(started.agent.hello);
    reach.ok = true;
  } catch (const std::exception& e) {
    reach.failure = e.what();
    link.agent.reset();
    link.connection.reset();
  }
  if (o.options.on_node_done) o.options.on_node_done();
}

// Over SSH: connect, make sure muster is there (shipping its bundle if need be), start the
// agent and read its hello.
class SshAgentLauncher : public AgentLauncher {
 public:
  SshAgentLauncher(std::shared_ptr<SshTransport> transport, const ClusterSpec& cluster)
      : transport_(std::move(transport)), cluster_(cluster) {}

  NodeAgent start(size_t node, const AgentStartOptions& options,
                  const std::atomic<bool>& cancelled) override {
    const NodeSpec& spec = cluster_.nodes.at(node);
    NodeAgent out;
    out.connection = transport_->connect(ssh_target_of(spec));
    out.timings = out.connection->timings();
    if (cancelled) throw SshError(SshFailure::Connection, spec.host, "called off");
    out.agent = start_agent(*out.connection, spec.host, options.shipping, bundle_, options.agent_args,
                            options.hello_timeout, cancelled);
    return out;
  }

 private:
  std::shared_ptr<SshTransport> transport_;
  ClusterSpec cluster_;
  BundleArchive bundle_;  // made once, if some node needs it
};

}  // namespace

ClusterSession::ClusterSession() : events_(std::make_unique<Events>()) {}

std::shared_ptr<AgentLauncher> make_ssh_agent_launcher(std::shared_ptr<SshTransport> transport,
                                                       const ClusterSpec& cluster) {
  return std::make_shared<SshAgentLauncher>(std::move(transport), cluster);
}

std::unique_ptr<ClusterSession> ClusterSession::open(std::shared_ptr<SshTransport> transport,
                                                     const ClusterSpec& cluster,
                                                     const SessionOptions& options,
                                                     const std::vector<int>& interrupt_fds) {
  return open(make_ssh_agent_launcher(std::move(transport), cluster), cluster, options, interrupt_fds);
}

std::unique_ptr<ClusterSession> ClusterSession::open(std::shared_ptr<AgentLauncher> launcher,
                                                     const ClusterSpec& cluster,
                                                     const SessionOptions& options,
                                                     const std::vector<int>& interrupt_fds) {
  auto opening = std::make_shared<Opening>();
  opening->launcher = launcher;
  opening->options = options;
  opening->start.agent_args = fmt::format(
      "agent --heartbeat-timeout {:g}", std::chrono::duration<double>(options.heartbeat_timeout).count());
  opening->start.shipping = options.shipping;
  opening->start.hello_timeout = options.hello_timeout;
  const size_t n = cluster.nodes.size();
  opening->hellos.resize(n);
  opening->reach.resize(n);
  for (const auto& node : cluster.nodes) {
    opening->links.push_back(std::make_unique<Link>());
    opening->links.back()->host = node.host;
  }
  if (pipe2(opening->done, O_CLOEXEC) != 0) throw Error(ErrorKind::Runtime, "cannot create a pipe");

  // The nodes are reached on threads of their own while this thread watches for Ctrl-C, so
  // that a stop request is answered at once however long a handshake takes.
  std::thread worker = signal_free_thread([opening] {
    for_each_node(opening->links.size(), opening->launcher->window(opening->options.fanout),
                  [&](size_t i) { open_node(*opening, i); });
    [[maybe_unused]] auto w = write(opening->done[1], "d", 1);
  });
  std::vector<pollfd> fds = {{opening->done[0], POLLIN, 0}};
  for (int fd : interrupt_fds) fds.push_back({fd, POLLIN, 0});
  for (;;) {
    if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) break;
    if (fds[0].revents) break;
    if (int signal_number = pending_interrupt(interrupt_fds)) {
      opening->cancelled = true;
      worker.detach();  // it gives back what it opened when it finishes
      throw Interrupted(signal_number);
    }
  }
  worker.join();

  std::unique_ptr<ClusterSession> session(new ClusterSession);
  session->heartbeat_timeout_ = options.heartbeat_timeout;
  session->launcher_ = launcher;
  session->links_ = std::move(opening->links);
  session->hellos_ = std::move(opening->hellos);
  session->reach_ = std::move(opening->reach);
  std::vector<std::string> problems;
  for (const auto& r : session->reach_) {
    session->lost_.push_back(r.ok ? "" : r.failure);
    if (!r.ok) problems.push_back(r.failure);
  }
  if (!problems.empty() && options.reach == Reach::AllOrNothing) {
    problems.push_back(fmt::format("{} of {} node{} could not be reached; nothing was started",
                                   problems.size(), n, n == 1 ? "" : "s"));
    throw Error(ErrorKind::Unreachable, problems);
  }
  for (size_t i = 0; i < n; ++i) {
    Link& link = *session->links_[i];
    if (!session->reach_[i].ok) continue;
    link.heard();
    link.io = signal_free_thread(drive_link, std::ref(link), i, std::ref(*session->events_));
  }
  return session;
}

ClusterSession::~ClusterSession() {
  // Goodbyes first, all at once; then each link's thread and connection.
  for (auto& link : links_)
    if (link->io.joinable()) link->close_channel(true);
  links_.clear();
}

bool ClusterSession::usable(size_t node) const { return lost_.at(node).empty(); }

void ClusterSession::lose(size_t node, const std::string& why) {
  if (lost_[node].empty()) lost_[node] = why;
  links_[node]->close_channel(false);
}

std::vector<std::pair<size_t, double>> ClusterSession::silent_nodes() const {
  std::vector<std::pair<size_t, double>> out;
  const int64_t now = now_ns();
  for (size_t i = 0; i < links_.size(); ++i) {
    if (!usable(i)) continue;
    double silent_s = double(now - links_[i]->last_heard_ns) / 1e9;
    if (silent_s * 1000 > double(heartbeat_timeout_.count())) out.emplace_back(i, silent_s);
  }
  return out;
}

namespace {

// "nothing heard from it for 10.2 s (last at 14:03:07)"
std::string silence_text(double seconds) {
  std::time_t last = std::time(nullptr) - std::time_t(seconds);
  return fmt::format("nothing heard from it for {:.1f} s (last at {:%H:%M:%S})", seconds,
                     fmt::localtime(last));
}

}  // namespace

std::vector<AskAnswer> ClusterSession::ask(const std::vector<std::pair<size_t, std::string>>& requests,
                                           Milliseconds limit, const std::vector<int>& interrupt_fds) {
  std::vector<AskAnswer> answers(requests.size());
  std::map<int, size_t> pending;  // request id -> index in `requests`
  for (size_t k = 0; k < requests.size(); ++k) {
    const size_t node = requests[k].first;
    if (!usable(node)) continue;
    const int id = ++next_id_;
    pending[id] = k;
    answers[k].sent = std::chrono::system_clock::now();
    links_[node]->send({FrameKind::Ask, id, requests[k].second});
  }
  auto forget_node = [&](size_t node) {
    for (auto it = pending.begin(); it != pending.end();)
      it = requests[it->second].first == node ? pending.erase(it) : std::next(it);
  };
  const auto deadline = Clock::now() + limit;
  while (!pending.empty() && Clock::now() < deadline) {
    if (int signal_number = pending_interrupt(interrupt_fds)) throw Interrupted(signal_number);
    for (LinkEvent& e : events_->take(Milliseconds(50))) {
      if (!e.frame) {
        lose(e.node, fmt::format("lost contact with {}: {}", links_[e.node]->host, e.why_ended));
        forget_node(e.node);
      } else if (e.frame->kind == FrameKind::Answer) {
        auto it = pending.find(e.frame->rank);
        if (it == pending.end() || requests[it->second].first != e.node) continue;  // a late one
        answers[it->second].payload = std::move(e.frame->payload);
        answers[it->second].answered = e.at;
        pending.erase(it);
      }
    }
    for (auto [node, seconds] : silent_nodes()) {
      lose(node, fmt::format("lost contact with {}: {}", links_[node]->host, silence_text(seconds)));
      forget_node(node);
    }
  }
  return answers;
}

// One job over the session, from the specs sent to the last node's report.
class SessionRun {
 public:
  SessionRun(ClusterSession& session, const RankPlan& plan, const LaunchRequest& request,
             const TeardownPolicy& policy, JobOutput& output, const std::vector<int>& interrupt_fds)
      : session_(session), plan_(plan), request_(request), policy_(policy), output_(output),
        interrupt_fds_(interrupt_fds), status_(size_t(plan.world_size())),
        stopped_(status_.size(), false) {}

  JobResult run() {
    check_every_node_is_usable();
    send_specs();
    try {
      supervise_until_every_node_reported();
    } catch (...) {
      abandon_unreported_nodes();
      throw;
    }
    record_outcomes();
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
    id_ = ++session_.next_id_;
    for (const auto& node : plan_.nodes) {
      if (node.ranks.empty()) continue;
      reported_[size_t(node.node_rank)] = false;
      NodeLaunchSpec spec{node.node_rank, plan_, request_, policy_};
      session_.links_[size_t(node.node_rank)]->send({FrameKind::Spec, id_, to_json(spec)});
    }
    if (policy_.timeout) deadline_ = Clock::now() + *policy_.timeout;
  }

  // Output, exits, interrupts, the timeout and silent nodes; one teardown for every node.
  void supervise_until_every_node_reported() {
    while (!every_node_reported()) {
      for (LinkEvent& e : session_.events_->take(Milliseconds(100))) handle(e);
      output_.flush();
      read_interrupts();
      check_deadline();
      check_silent_nodes();
      if (give_up_at_ && Clock::now() >= *give_up_at_) {
        give_up_on_unreported_nodes();
        break;
      }
    }
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

  void handle(LinkEvent& e) {
    if (!e.frame) return on_link_ended(e.node, e.why_ended);
    if (!reported_.count(e.node)) return;  // a node without ranks in this run
    Frame& f = *e.frame;
    try {
      switch (f.kind) {
        case FrameKind::Bound:
          for (const auto& [rank, report] : bindings_from_json(f.payload)) output_.rank_bound(rank, report);
          break;
        case FrameKind::Out: on_line(e.node, f.rank, OutputStream::Stdout, f.payload); break;
        case FrameKind::Err: on_line(e.node, f.rank, OutputStream::Stderr, f.payload); break;
        case FrameKind::Exit: on_exit(e.node, f.rank, f.payload); break;
        case FrameKind::Done:
          if (f.rank == id_) on_done(e.node, f.payload);
          break;
        case FrameKind::Fail:
          if (f.rank == id_ || f.rank < 0) on_fail(e.node, f.payload);
          break;
        default: break;
      }
    } catch (const Error& bad) {  // every payload reader throws Error alone
      result_.notes.push_back(fmt::format("{} sent a malformed message: {}", host(e.node), bad.what()));
    }
  }

  void on_line(size_t node, int rank, OutputStream stream, const std::string& text) {
    if (holds_rank(node, rank)) output_.line(rank, stream, text);
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

  void on_done(size_t node, const std::string& payload) {
    reported_[node] = true;
    const NodeRunReport done = node_run_report_from_json(payload);
    result_.escaped_killed = int(std::min<long>(long(result_.escaped_killed) + done.escaped_killed, INT_MAX));
    if (!done.start_error.empty()) {
      result_.start_error = fmt::format("{}: {}", host(node), done.start_error);
      if (result_.end == JobEnd::RankFailed || result_.end == JobEnd::Completed)
        result_.end = JobEnd::StartFailed;
    }
    for (const auto& note : done.notes) result_.notes.push_back(fmt::format("{}: {}", host(node), note));
    for (const auto& s : done.stuck) result_.stuck.push_back({s.rank, fmt::format("{}: {}", host(node), s.description)});
  }

  void on_fail(size_t node, const std::string& why) {
    reported_[node] = true;
    result_.notes.push_back(fmt::format("{}: the agent failed: {}", host(node), why));
    if (tearing_down_) return;
    result_.start_error = fmt::format("{}: {}", host(node), why);
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
      } else if (result_.end == JobEnd::Interrupted) {
        send_stop();  // a second Ctrl-C: every agent sends SIGKILL at once
      }
    }
  }

  void check_deadline() {
    if (settle_until_ && Clock::now() >= *settle_until_) stop_everything(JobEnd::RankFailed);
    if (deadline_ && Clock::now() >= *deadline_) stop_everything(JobEnd::TimedOut);
  }

  void check_silent_nodes() {
    for (auto [node, seconds] : session_.silent_nodes())
      node_lost(node, silence_text(seconds) + "; its agent stops its ranks on its own");
  }

  void stop_everything(JobEnd why) {
    if (tearing_down_) return;
    tearing_down_ = true;
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
        session_.links_[node]->send({FrameKind::Stop, id_, ""});
  }

  // The way out when an exception unwinds through the run (an output sink that threw):
  // every node still running gets two stops (SIGKILL at once) and its channel closed, which
  // its agent also takes for a stop. The session is not used for them again.
  void abandon_unreported_nodes() noexcept {
    try {
      for (auto& [node, reported] : reported_) {
        if (reported || !session_.usable(node)) continue;
        for (int i = 0; i < 2; ++i) session_.links_[node]->send({FrameKind::Stop, id_, ""});
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

  bool every_node_reported() const {
    return std::all_of(reported_.begin(), reported_.end(), [](const auto& r) { return r.second; });
  }
  bool holds_rank(size_t node, int rank) const {
    const auto& ranks = plan_.nodes[node].ranks;
    return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
  }
  const std::string& host(size_t node) const { return session_.links_[node]->host; }

  ClusterSession& session_;
  const RankPlan& plan_;
  const LaunchRequest& request_;
  const TeardownPolicy& policy_;
  JobOutput& output_;
  const std::vector<int>& interrupt_fds_;
  int id_ = 0;
  JobResult result_;
  std::vector<std::optional<ExitStatus>> status_;
  std::vector<bool> stopped_;           // still running when teardown began
  std::map<size_t, bool> reported_;     // the nodes of this run, and whether each has ended
  bool tearing_down_ = false;
  std::optional<Clock::time_point> deadline_, give_up_at_;
  std::optional<Clock::time_point> settle_until_;  // a rank failed: teardown begins then
};

JobResult ClusterSession::run(const RankPlan& plan, const LaunchRequest& request,
                              const TeardownPolicy& policy, JobOutput& output,
                              const std::vector<int>& interrupt_fds) {
  JobResult result = SessionRun(*this, plan, request, policy, output, interrupt_fds).run();
  // A scheduler that ended the agents (scancel, a time limit, a failed node) signals the
  // ranks or loses a node, and says so a moment later: its words are the cause, and a time
  // limit is a timeout. A rank that just failed on its own costs no wait.
  const bool ended_from_outside =
      result.end == JobEnd::NodeLost ||
      std::any_of(result.ranks.begin(), result.ranks.end(), [](const RankOutcome& r) {
        return r.status && r.status->kind == ExitStatus::Kind::Signaled && !r.stopped_by_teardown;
      });
  if (result.end != JobEnd::Completed && result.end != JobEnd::Interrupted) {
    auto outside = launcher_->outside_end(std::chrono::milliseconds(ended_from_outside ? 1000 : 0));
    if (!outside.note.empty()) result.notes.push_back(outside.note);
    if (outside.time_limit) result.end = JobEnd::TimeLimit;
  }
  return result;
}

}  // namespace muster
