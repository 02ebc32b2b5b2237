#include "launcher/remote/remote_job.h"

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/remote/agent_protocol.h"
#include "launcher/remote/shell_quote.h"

namespace muster {

using Clock = std::chrono::steady_clock;

SshTarget ssh_target_of(const NodeSpec& node) { return {node.host, node.address, node.ssh}; }

// A node's connection, its agent's channel, and the thread that alone drives them once the
// job runs (libssh sessions are not thread-safe).
struct RemoteJob::Link {
  std::string host;
  std::unique_ptr<SshConnection> connection;
  std::unique_ptr<RemoteCommand> agent;
  FrameReader reader;
  std::string agent_stderr;
  int last_request = 0;         // Ask ids, so a late answer is never taken for a newer one
  std::thread io;
  std::mutex mutex;             // guards outgoing and closing
  std::string outgoing;         // frames to send, written by the io thread
  bool closing = false;         // drop the channel: the agent stops its ranks on its own
};

namespace {

// Reads frames until the first of `kind` (with request id `id`, for answers); nullopt when
// the channel ended first. A late answer to an earlier request is dropped here.
std::optional<Frame> await_frame(RemoteJob::Link& link, FrameKind kind, std::chrono::seconds limit,
                                 int id = -1) {
  auto deadline = Clock::now() + limit;
  for (;;) {
    while (auto frame = link.reader.next()) {
      if (frame->kind == kind && (id < 0 || frame->rank == id)) return frame;
      if (frame->kind == FrameKind::Fail)
        throw SshError(SshFailure::RemoteCommand, link.host, "the agent failed: " + frame->payload);
    }
    if (Clock::now() > deadline)
      throw SshError(SshFailure::Timeout, link.host, "the agent did not answer in time");
    std::string out;
    if (!link.agent->read(out, link.agent_stderr, std::chrono::milliseconds(200)) && out.empty())
      return std::nullopt;
    link.reader.feed(out);
  }
}

// What the io threads tell the supervising thread.
struct LinkEvent {
  size_t node = 0;
  std::optional<Frame> frame;  // unset: the link ended
  std::string why_ended;
};

class EventQueue {
 public:
  void push(LinkEvent e) {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(e));
    ready_.notify_one();
  }
  std::deque<LinkEvent> take(std::chrono::milliseconds wait) {
    std::unique_lock lock(mutex_);
    ready_.wait_for(lock, wait, [&] { return !events_.empty(); });
    return std::exchange(events_, {});
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<LinkEvent> events_;
};

// Drives one link: sends queued frames and a heartbeat each second, forwards every frame
// received, and reports how the link ended.
void drive_link(RemoteJob::Link& link, size_t node, EventQueue& events) {
  auto next_beat = Clock::now();
  std::string why = "the connection closed";
  try {
    for (;;) {
      std::string outgoing;
      {
        std::lock_guard lock(link.mutex);
        if (link.closing) return;
        outgoing.swap(link.outgoing);
      }
      if (Clock::now() >= next_beat) {
        outgoing += encode_frame({FrameKind::Beat, -1, ""});
        next_beat = Clock::now() + std::chrono::seconds(1);
      }
      if (!outgoing.empty()) link.agent->write(outgoing);
      std::string out;
      bool open = link.agent->read(out, link.agent_stderr, std::chrono::milliseconds(50));
      link.reader.feed(out);
      while (auto frame = link.reader.next()) {
        bool done = frame->kind == FrameKind::Done || frame->kind == FrameKind::Fail;
        events.push({node, std::move(*frame), ""});
        if (done) return;
      }
      if (!open) break;
    }
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (!link.agent_stderr.empty()) why += ": " + link.agent_stderr.substr(0, 300);
  events.push({node, std::nullopt, why});
}

ExitStatus exit_status_of(const std::string& payload) {
  auto j = nlohmann::json::parse(payload);
  return j.at("signal").get<bool>() ? ExitStatus::signaled(j.at("code")) : ExitStatus::exited(j.at("code"));
}

}  // namespace

std::unique_ptr<RemoteJob> RemoteJob::open(SshTransport& transport, const ClusterSpec& cluster,
                                           const RemoteOptions& options) {
  std::unique_ptr<RemoteJob> job(new RemoteJob);
  const size_t n = cluster.nodes.size();
  job->hellos_.resize(n);
  job->reach_.resize(n);
  std::vector<std::string> failures(n);
  for (const auto& node : cluster.nodes) {
    job->links_.push_back(std::make_unique<Link>());
    job->links_.back()->host = node.host;
  }
  for_each_node(n, options.fanout, [&](size_t i) {
    Link& link = *job->links_[i];
    try {
      link.connection = transport.connect(ssh_target_of(cluster.nodes[i]));
      job->reach_[i].timings = link.connection->timings();
      if (options.time_command) {
        auto start = Clock::now();
        run_remote(*link.connection, link.host, "true");
        job->reach_[i].command_rtt_ms =
            std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      }
      std::string muster = ensure_muster_on_node(*link.connection, link.host, options.shipping);
      link.agent = link.connection->start(shell_quote(muster) + " agent");
      auto hello = await_frame(link, FrameKind::Hello, std::chrono::seconds(60));
      if (!hello)
        throw SshError(SshFailure::RemoteCommand, link.host,
                       "the agent ended before saying hello" +
                           (link.agent_stderr.empty() ? "" : ": " + link.agent_stderr.substr(0, 300)));
      job->hellos_[i] = node_hello_from_json(hello->payload);
      job->reach_[i].ok = true;
    } catch (const std::exception& e) {
      failures[i] = e.what();
      job->reach_[i].failure = e.what();
      link.agent.reset();
      link.connection.reset();
    }
    if (options.on_node_done) options.on_node_done();
  });
  std::vector<std::string> problems;
  for (const auto& f : failures)
    if (!f.empty()) problems.push_back(f);
  if (!problems.empty() && options.reach == Reach::AllOrNothing) {
    problems.push_back(fmt::format("{} of {} node{} could not be reached; nothing was started",
                                   problems.size(), n, n == 1 ? "" : "s"));
    throw Error(ErrorKind::Runtime, problems);
  }
  return job;
}

std::vector<std::optional<std::string>> RemoteJob::ask(
    const std::vector<std::pair<size_t, std::string>>& requests, std::chrono::seconds limit) {
  std::vector<std::optional<std::string>> answers(requests.size());
  std::vector<std::thread> threads;
  for (size_t k = 0; k < requests.size(); ++k)
    threads.emplace_back([&, k] {
      Link& link = *links_[requests[k].first];
      if (!link.agent) return;
      try {
        const int id = ++link.last_request;
        link.agent->write(encode_frame({FrameKind::Ask, id, requests[k].second}));
        if (auto answer = await_frame(link, FrameKind::Answer, limit, id)) answers[k] = answer->payload;
      } catch (const std::exception&) {
        // no answer: the caller reports the node
      }
    });
  for (auto& t : threads) t.join();
  return answers;
}

RemoteJob::~RemoteJob() {
  for (auto& link : links_) {
    {
      std::lock_guard lock(link->mutex);
      link->closing = true;
    }
    if (link->io.joinable()) link->io.join();
  }
}

JobResult RemoteJob::run(const RankPlan& plan, const LaunchRequest& request,
                         const TeardownPolicy& policy, JobOutput& output,
                         const std::vector<int>& interrupt_fds) {
  JobResult result;
  std::vector<std::optional<ExitStatus>> status(size_t(plan.world_size()));
  std::vector<bool> node_finished(links_.size(), false);
  EventQueue events;

  // 1. Each node gets its part of the plan; the agents start their ranks at once.
  for (size_t i = 0; i < links_.size(); ++i) {
    NodeLaunchSpec spec{int(i), plan, request, policy};
    links_[i]->outgoing = encode_frame({FrameKind::Spec, -1, to_json(spec)});
    links_[i]->io = std::thread(drive_link, std::ref(*links_[i]), i, std::ref(events));
  }

  // 2. Supervise: output, exits, interrupts, the timeout; one teardown for every node.
  bool tearing_down = false;
  std::vector<bool> stopped(status.size(), false);  // still running when teardown began
  std::optional<Clock::time_point> give_up_at;
  const auto deadline = policy.timeout ? std::optional(Clock::now() + *policy.timeout) : std::nullopt;
  auto stop_everything = [&](JobEnd why) {
    if (tearing_down) return;
    tearing_down = true;
    result.end = why;
    for (size_t r = 0; r < status.size(); ++r) stopped[r] = !status[r].has_value();
    for (auto& link : links_) {
      std::lock_guard lock(link->mutex);
      link->outgoing += encode_frame({FrameKind::Stop, -1, ""});
    }
    // Agents escalate to SIGKILL after the grace period and name what survives; past that
    // (and a margin for the network), the head stops waiting for them.
    give_up_at = Clock::now() + policy.grace + policy.kill_wait + std::chrono::seconds(10);
  };
  auto all_finished = [&] {
    return std::all_of(node_finished.begin(), node_finished.end(), [](bool f) { return f; });
  };
  while (!all_finished()) {
    for (LinkEvent& e : events.take(std::chrono::milliseconds(100))) {
      const std::string& host = links_[e.node]->host;
      if (!e.frame) {
        node_finished[e.node] = true;
        bool had_running = false;
        for (int rank : plan.nodes[e.node].ranks) had_running |= !status[size_t(rank)].has_value();
        if (had_running) {
          result.notes.push_back(fmt::format("lost contact with {}: {}", host, e.why_ended));
          if (!tearing_down) {
            result.first_failed_rank = plan.nodes[e.node].ranks.front();
            stop_everything(JobEnd::RankFailed);
          }
        }
        continue;
      }
      Frame& f = *e.frame;
      try {
        switch (f.kind) {
          case FrameKind::Bound:
            for (const auto& [rank, report] : bindings_from_json(f.payload)) output.rank_bound(rank, report);
            break;
          case FrameKind::Out: output.line(f.rank, OutputStream::Stdout, f.payload); break;
          case FrameKind::Err: output.line(f.rank, OutputStream::Stderr, f.payload); break;
          case FrameKind::Exit: {
            ExitStatus s = exit_status_of(f.payload);
            if (f.rank < 0 || size_t(f.rank) >= status.size()) break;
            status[size_t(f.rank)] = s;
            output.rank_ended(f.rank, s);
            if (!s.success() && !tearing_down) {
              result.first_failed_rank = f.rank;
              stop_everything(JobEnd::RankFailed);
            }
            break;
          }
          case FrameKind::Done: {
            node_finished[e.node] = true;
            auto done = nlohmann::json::parse(f.payload);
            result.escaped_killed += done.at("escaped").get<int>();
            std::string start_error = done.at("start_error");
            if (!start_error.empty()) {
              result.start_error = fmt::format("{}: {}", host, start_error);
              if (result.end == JobEnd::RankFailed || result.end == JobEnd::Completed)
                result.end = JobEnd::StartFailed;
            }
            for (const auto& s : done.at("stuck"))
              result.stuck.push_back({s.at("rank").get<int>(),
                                      fmt::format("{}: {}", host, s.at("process").get<std::string>())});
            break;
          }
          case FrameKind::Fail:
            node_finished[e.node] = true;
            result.notes.push_back(fmt::format("{}: the agent failed: {}", host, f.payload));
            if (!tearing_down) {
              result.start_error = fmt::format("{}: {}", host, f.payload);
              result.first_failed_rank = plan.nodes[e.node].ranks.empty() ? 0 : plan.nodes[e.node].ranks.front();
              stop_everything(JobEnd::StartFailed);
            }
            break;
          default: break;
        }
      } catch (const nlohmann::json::exception& bad) {
        result.notes.push_back(fmt::format("{} sent a malformed message: {}", host, bad.what()));
      }
    }
    output.flush();
    for (int fd : interrupt_fds) {
      unsigned char signal_number = 0;
      while (read(fd, &signal_number, 1) == 1)
        if (!tearing_down) {
          result.received_signal = signal_number;
          stop_everything(JobEnd::Interrupted);
        }
    }
    if (deadline && Clock::now() >= *deadline) stop_everything(JobEnd::TimedOut);
    if (give_up_at && Clock::now() >= *give_up_at) {
      for (size_t i = 0; i < links_.size(); ++i)
        if (!node_finished[i])
          result.notes.push_back(fmt::format("{} did not confirm that its ranks stopped; its "
                                             "agent stops them once the connection closes",
                                             links_[i]->host));
      break;
    }
  }

  // 3. The job's record, rank by rank.
  for (size_t r = 0; r < status.size(); ++r) {
    RankOutcome o;
    o.rank = int(r);
    o.status = status[r];
    o.stopped_by_teardown = stopped[r];
    result.ranks.push_back(o);
  }
  return result;
}

}  // namespace muster
