#include "launcher/json_fields.h"
#include "launcher/remote/session.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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
#include "launcher/text_bytes.h"
#include "launcher/thread.h"

namespace muster {

using Clock = std::chrono::steady_clock;
using Milliseconds = std::chrono::milliseconds;

SshTarget ssh_target_of(const NodeSpec& node) { return {node.host, node.address, node.ssh}; }

namespace {

// How often each side says it is alive; the timeout is several of these.
constexpr Milliseconds kBeatInterval{1000};

// A driver waits at most this long before it looks again at links whose node waits for the
// head (flow control).
constexpr Milliseconds kLinkPollSlice{50};

// How many threads drive the links, at most: each polls its share, so a few keep up with
// thousands of nodes (the agents say little but heartbeats), while a link whose agent is slow
// to take its input holds up only its share.
constexpr size_t kLinkDrivers = 4;

int64_t now_ns() { return Clock::now().time_since_epoch().count(); }

}  // namespace

int pending_interrupt(const std::vector<int>& fds) {
  for (int fd : fds) {
    unsigned char signal_number = 0;
    if (read(fd, &signal_number, 1) == 1) return signal_number;
  }
  return 0;
}

namespace {

// What a link's thread tells the head's thread: a frame, or that the link ended.
using LinkEvent = ClusterSession::NodeEvent;

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

// The few threads that drive every link, each its share (as srun and PRRTE do), so that the
// head's threads do not grow with the nodes (a thread per node would be 4096 at 4096).
// A link is only ever driven by its one driver (libssh sessions are not thread-safe).
struct LinkDriver {
  int wake[2] = {-1, -1};      // a byte: some link of this driver has something to send
  std::mutex mutex;            // guards woken
  std::vector<size_t> woken;   // positions, in this driver's share, of the links that have
                               // something to send or are closing: each at most once
  std::thread thread;

  LinkDriver() {
    if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) throw Error(ErrorKind::Runtime, "cannot create a pipe");
  }
  ~LinkDriver() {
    if (thread.joinable()) thread.join();
    for (int fd : wake) close(fd);
  }
  void notify(size_t position) {
    {
      std::lock_guard lock(mutex);
      woken.push_back(position);
    }
    [[maybe_unused]] auto n = write(wake[1], "w", 1);
  }
};

// A node's connection and its agent's channel, driven by one LinkDriver once the session is
// open.
struct ClusterSession::Link {
  std::string host;
  std::unique_ptr<SshConnection> connection;
  std::unique_ptr<RemoteCommand> agent;
  FrameReader reader{kMaxAgentFramePayload};
  std::string agent_stderr;
  std::mutex mutex;             // guards outgoing, closing and driver
  // Frames to send, each encoded once: a frame for every node (a fence's every part) is
  // queued as one shared copy, however many nodes it goes to.
  std::deque<std::shared_ptr<const std::string>> outgoing;
  size_t outgoing_bytes = 0;    // what `outgoing` holds for this node, at most kMaxQueuedForNode
  bool closing = false;
  std::string closing_why;      // set when the session closed it for a reason of its own
  LinkDriver* driver = nullptr;  // set when the session opens; none for a node not reached
  size_t position = 0;           // in its driver's share
  bool wake_pending = false;     // its driver was told and has not stepped it since
  std::atomic<int64_t> last_heard_ns{0};
  // Its agent said hello: from then until the drivers start, the opening thread keeps it
  // alive (it alone touches the link once its node is open).
  std::atomic<bool> agent_started{false};
  // The driver's own, touched by no other thread.
  Clock::time_point next_beat{};
  bool waiting_for_room = false;  // the head was behind at the last step: the node waits

  void send(std::shared_ptr<const std::string> bytes) {
    std::lock_guard lock(mutex);
    if (closing) return;
    // A node that takes nothing while frames pile up for it is not reading: it is lost, and
    // the head's memory is not.
    if (outgoing_bytes + bytes->size() > kMaxQueuedForNode) {
      closing_why = fmt::format("its agent took none of the {} MiB queued for it", outgoing_bytes >> 20);
      closing = true;
    } else {
      outgoing_bytes += bytes->size();
      outgoing.push_back(std::move(bytes));
    }
    wake_driver();
  }
  // Stops driving the link; with `say_bye`, the agent is told the session is over first.
  void close_channel(bool say_bye) {
    std::lock_guard lock(mutex);
    if (closing) return;
    if (say_bye) outgoing.push_back(std::make_shared<const std::string>(encode_frame({FrameKind::Bye, -1, ""})));
    closing = true;
    wake_driver();
  }
  void heard() { last_heard_ns = now_ns(); }

 private:
  void wake_driver() {  // with `mutex` held
    if (!driver || wake_pending) return;
    wake_pending = true;
    driver->notify(position);
  }
};

namespace {

enum class LinkStep {
  Idle,   // nothing more to read now
  Busy,   // it read or wrote something: there may be more to read
  Ended,  // closed by the session, or the channel ended (then an event says why)
};

// One step of a link: sends what is queued and a heartbeat when one is due, and forwards
// every frame received (heartbeats only count as heard). When the channel ends, the event
// that says so carries the agent's last words.
LinkStep step_link(ClusterSession::Link& link, size_t node, ClusterSession::Events& events) {
  std::string why = "the connection closed";
  try {
    // 1. What is queued, and a heartbeat when one is due.
    std::deque<std::shared_ptr<const std::string>> outgoing;
    bool closing;
    std::string closed_because;
    {
      std::lock_guard lock(link.mutex);
      outgoing.swap(link.outgoing);
      link.outgoing_bytes = 0;
      closing = link.closing;
      closed_because = link.closing_why;
      link.wake_pending = false;
    }
    if (!closed_because.empty()) throw Error(ErrorKind::Runtime, closed_because);
    if (!closing && Clock::now() >= link.next_beat) {
      outgoing.push_back(std::make_shared<const std::string>(encode_frame({FrameKind::Beat, -1, ""})));
      link.next_beat = Clock::now() + kBeatInterval;
    }
    // The write blocks only while the node's SSH window is full: a frozen node with megabytes
    // queued for it. That holds up this driver's other links too (until the node is lost);
    // writing without blocking is the step after this one.
    const bool wrote = !outgoing.empty();
    for (const auto& bytes : outgoing) link.agent->write(*bytes);
    if (closing) return LinkStep::Ended;

    // 2. What has arrived, unless the head is behind: then the node waits (flow control),
    //    and the silence is the head's own, not the node's.
    link.waiting_for_room = !events.has_room();
    if (link.waiting_for_room) {
      link.heard();
      return LinkStep::Idle;
    }
    std::string in;
    const bool open = link.agent->read(in, link.agent_stderr, Milliseconds(0));
    if (link.agent_stderr.size() > kKeptStderr)  // a ring: its last words are kept
      link.agent_stderr.erase(0, character_boundary(link.agent_stderr,
                                                    link.agent_stderr.size() - kKeptStderr, true));
    if (!in.empty()) {
      link.heard();
      link.reader.feed(in);
      while (auto frame = link.reader.next())
        if (frame->kind != FrameKind::Beat)
          events.push({node, std::move(*frame), "", std::chrono::system_clock::now()});
    }
    // A write may leave what arrived meanwhile in the SSH library's buffer, where no poll(2)
    // sees it: a link that wrote is read once more before its driver waits.
    if (open) return in.empty() && !wrote ? LinkStep::Idle : LinkStep::Busy;
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (!link.agent_stderr.empty()) {  // the agent's last words, which say why it ended
    const std::string& words = link.agent_stderr;
    why += ": " + words.substr(character_boundary(words, words.size() - std::min<size_t>(300, words.size()), true));
  }
  events.push({node, std::nullopt, why, std::chrono::system_clock::now()});
  return LinkStep::Ended;
}

// A driver's loop over its share of the links, until every one has ended: a link is stepped
// when its channel is readable, when something was queued for it, when its heartbeat is due,
// or, without a descriptor to wait on, every few milliseconds. One poll(2) waits for them all.
void drive_links(LinkDriver& driver, const std::vector<std::pair<ClusterSession::Link*, size_t>>& share,
                 ClusterSession::Events& events) {
  const size_t n = share.size();
  std::vector<bool> due(n, true), ended(n, false);
  size_t open = n;
  std::vector<pollfd> fds;
  std::vector<size_t> owner;  // of each descriptor after the first (the driver's wake pipe)
  while (open > 0) {
    bool busy = false;
    for (size_t k = 0; k < n; ++k) {
      if (ended[k] || !due[k]) continue;
      due[k] = false;
      switch (step_link(*share[k].first, share[k].second, events)) {
        case LinkStep::Ended: ended[k] = true; --open; break;
        case LinkStep::Busy: due[k] = busy = true; break;
        case LinkStep::Idle: break;
      }
    }
    if (open == 0) break;

    // Wait for any of them (not at all while one may have more to read, so that the others
    // are looked at too), for the wake pipe, or for the next heartbeat.
    auto now = Clock::now();
    Milliseconds wait = busy ? Milliseconds(0) : kLinkPollSlice;
    fds.assign(1, {driver.wake[0], POLLIN, 0});
    owner.clear();
    for (size_t k = 0; k < n; ++k) {
      if (ended[k]) continue;
      const ClusterSession::Link& link = *share[k].first;
      wait = std::min(wait, std::chrono::duration_cast<Milliseconds>(link.next_beat - now) + Milliseconds(1));
      const int channel_fd = link.waiting_for_room ? -1 : link.agent->wait_fd();
      if (channel_fd >= 0) {
        fds.push_back({channel_fd, POLLIN, 0});
        owner.push_back(k);
      } else if (!link.waiting_for_room) {
        wait = std::min(wait, Milliseconds(5));  // no descriptor: poll its reads
      }
    }
    poll(fds.data(), fds.size(), int(std::max<long>(0, wait.count())));
    if (fds[0].revents) {
      char drain[64];
      while (read(driver.wake[0], drain, sizeof drain) > 0) {}
      std::lock_guard lock(driver.mutex);
      for (size_t k : driver.woken) due[k] = true;
      driver.woken.clear();
    }
    for (size_t f = 1; f < fds.size(); ++f)
      if (fds[f].revents) due[owner[f - 1]] = true;
    now = Clock::now();
    for (size_t k = 0; k < n; ++k) {
      const ClusterSession::Link& link = *share[k].first;
      if (!ended[k] && (now >= link.next_beat || link.waiting_for_room || link.agent->wait_fd() < 0))
        due[k] = true;
    }
  }
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
    link.agent_started = true;
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
    if (poll(fds.data(), fds.size(), int(kBeatInterval.count())) < 0 && errno != EINTR) break;
    if (fds[0].revents) break;
    // The agents already started hear the head while the others are reached: reaching the
    // rest can outlast an agent's silence limit (shipping the bundle to 32 fresh nodes takes
    // about 28 s, the limit is 10 s), and an agent that hears nothing gives the head up.
    for (auto& link : opening->links)
      if (link->agent_started) try {
          link->agent->write(encode_frame({FrameKind::Beat, -1, ""}));
        } catch (const std::exception&) {  // its driver will find the channel ended, and say why
        }
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
  session->start_drivers();
  return session;
}

// The nodes reached, dealt round-robin to a few drivers.
void ClusterSession::start_drivers() {
  std::vector<size_t> reached;
  for (size_t i = 0; i < links_.size(); ++i)
    if (reach_[i].ok) reached.push_back(i);
  const size_t count = std::min(reached.size(), kLinkDrivers);
  std::vector<std::vector<std::pair<Link*, size_t>>> shares(count);
  for (size_t k = 0; k < reached.size(); ++k) {
    Link& link = *links_[reached[k]];
    link.heard();
    auto& share = shares[k % count];
    std::lock_guard lock(link.mutex);
    link.position = share.size();
    share.emplace_back(&link, reached[k]);
  }
  for (size_t d = 0; d < count; ++d) {
    drivers_.push_back(std::make_unique<LinkDriver>());
    LinkDriver& driver = *drivers_.back();
    for (auto [link, node] : shares[d]) {
      std::lock_guard lock(link->mutex);
      link->driver = &driver;
    }
    driver.thread = signal_free_thread(
        [&driver, share = std::move(shares[d]), &events = *events_] { drive_links(driver, share, events); });
  }
}

ClusterSession::~ClusterSession() {
  // Goodbyes first, all at once; then the drivers end, and then the connections.
  for (auto& link : links_) link->close_channel(true);
  drivers_.clear();
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

std::string silence_text(double seconds) {
  std::time_t last = std::time(nullptr) - std::time_t(seconds);
  return fmt::format("nothing heard from it for {:.1f} s (last at {:%H:%M:%S})", seconds,
                     fmt::localtime(last));
}

std::vector<AskAnswer> ClusterSession::ask(const std::vector<std::pair<size_t, std::string>>& requests,
                                           Milliseconds limit, const std::vector<int>& interrupt_fds) {
  std::vector<AskAnswer> answers(requests.size());
  bool sent = false;
  AskFlow flow;
  flow.next = [&] {
    std::vector<AskRequest> out;
    if (!sent)
      for (size_t k = 0; k < requests.size(); ++k) out.push_back({requests[k].first, requests[k].second, limit, k});
    sent = true;
    return out;
  };
  flow.answered = [&](size_t k, AskAnswer answer) { answers[k] = std::move(answer); };
  flow.finished = [&] { return sent; };
  ask_stream(flow, interrupt_fds);
  return answers;
}

void ClusterSession::ask_stream(const AskFlow& flow, const std::vector<int>& interrupt_fds) {
  struct Pending {
    AskRequest request;
    AskAnswer answer;
    Clock::time_point deadline;
  };
  std::map<int, Pending> pending;  // by request id
  auto end = [&](std::map<int, Pending>::iterator it) {
    flow.answered(it->second.request.tag, std::move(it->second.answer));
    return pending.erase(it);
  };
  auto end_all_of = [&](size_t node) {
    for (auto it = pending.begin(); it != pending.end();)
      it = it->second.request.node == node ? end(it) : std::next(it);
  };
  while (true) {
    for (AskRequest& r : flow.next()) {
      AskAnswer unanswered;
      unanswered.sent = std::chrono::system_clock::now();
      if (!usable(r.node)) {
        flow.answered(r.tag, std::move(unanswered));
        continue;
      }
      const int id = ++next_id_;
      send(r.node, {FrameKind::Ask, id, r.payload});
      const auto deadline = Clock::now() + r.limit;
      pending.emplace(id, Pending{std::move(r), std::move(unanswered), deadline});
    }
    if (pending.empty() && flow.finished()) return;
    if (int signal_number = pending_interrupt(interrupt_fds)) throw Interrupted(signal_number);
    for (LinkEvent& e : events_->take(Milliseconds(50))) {
      if (!e.frame) {
        lose(e.node, fmt::format("lost contact with {}: {}", links_[e.node]->host, e.why_ended));
        end_all_of(e.node);
      } else if (e.frame->kind == FrameKind::Answer) {
        auto it = pending.find(e.frame->rank);
        if (it == pending.end() || it->second.request.node != e.node) continue;  // a late one
        it->second.answer.payload = std::move(e.frame->payload);
        it->second.answer.answered = e.at;
        end(it);
      }
    }
    for (auto [node, seconds] : silent_nodes()) {
      lose(node, fmt::format("lost contact with {}: {}", links_[node]->host, silence_text(seconds)));
      end_all_of(node);
    }
    const auto now = Clock::now();
    for (auto it = pending.begin(); it != pending.end();)
      it = it->second.deadline <= now ? end(it) : std::next(it);
  }
}

std::vector<ClusterSession::NodeEvent> ClusterSession::take_events(Milliseconds wait) {
  std::deque<NodeEvent> events = events_->take(wait);
  return {std::make_move_iterator(events.begin()), std::make_move_iterator(events.end())};
}

void ClusterSession::send(size_t node, const Frame& frame) {
  links_.at(node)->send(std::make_shared<const std::string>(encode_frame(frame)));
}

void ClusterSession::send_to_each(const std::vector<size_t>& nodes, const Frame& frame) {
  const auto bytes = std::make_shared<const std::string>(encode_frame(frame));
  for (size_t node : nodes) links_.at(node)->send(bytes);
}

const std::string& ClusterSession::host(size_t node) const { return links_.at(node)->host; }

AgentLauncher::OutsideEnd ClusterSession::outside_end(Milliseconds wait) { return launcher_->outside_end(wait); }

}  // namespace muster
