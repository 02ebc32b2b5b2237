#include "launcher/remote/agent.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/cluster/job_gpus.h"
#include "launcher/error.h"
#include "launcher/json_fields.h"
#include "launcher/local/fence_exchange.h"
#include "launcher/local/mpi_world.h"
#include "launcher/local/pmix_service.h"
#include "launcher/local/posix_spawner.h"
#include "launcher/local/rank_stacks.h"
#include "launcher/local/stack_tree.h"
#include "launcher/local/self.h"
#include "launcher/local/shutdown_signals.h"
#include "launcher/remote/agent_protocol.h"
#include "launcher/remote/health_report.h"
#include "launcher/remote/launch_spec.h"
#include "launcher/text_bytes.h"
#include "launcher/thread.h"
#include "probes/free_port.h"
#include "probes/interfaces.h"
#include "probes/job_server.h"
#include "probes/pair_schedule.h"
#include "probes/starvation.h"
#include "probes/tcp_probe.h"
#include "topology/health/counter_baseline.h"
#include "topology/health/node_record.h"
#include "topology/line_rate.h"
#include "topology/sysfs_pci.h"
#include "topology/topology_source.h"

namespace muster {
namespace {

using Clock = std::chrono::steady_clock;

// Frames to the head; whole frames only, from one thread at a time. The channel is written
// without blocking forever: once the head is known to be lost, output is dropped so that the
// agent can get on with stopping its ranks.
class FrameWriter {
 public:
  explicit FrameWriter(int fd) : fd_(fd) { fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK); }
  void send(const Frame& frame) { write_all(encode_frame(frame)); }
  void write_all(std::string_view bytes) {
    std::lock_guard lock(mutex_);
    while (!bytes.empty() && !head_lost_) {
      ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n > 0) {
        bytes.remove_prefix(size_t(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN) return;  // the head is gone
      pollfd p{fd_, POLLOUT, 0};
      poll(&p, 1, 100);  // the head reads slowly: wait, but look at head_lost_ again soon
    }
  }
  void head_lost() { head_lost_ = true; }

 private:
  int fd_;
  std::mutex mutex_;
  std::atomic<bool> head_lost_{false};
};

// The current run's ranks on this node, for the thread that reads their stacks: the
// process of each that runs, and those that have ended.
class RunningRanks {
 public:
  void started(int rank, pid_t pid) {
    std::lock_guard lock(mutex_);
    pids_[rank] = pid;
  }
  void ended(int rank) {
    std::lock_guard lock(mutex_);
    pids_.erase(rank);
    ended_.push_back(rank);
  }
  void clear() {
    std::lock_guard lock(mutex_);
    pids_.clear();
    ended_.clear();
  }
  std::pair<std::map<int, pid_t>, std::vector<int>> now() const {
    std::lock_guard lock(mutex_);
    return {pids_, ended_};
  }

 private:
  mutable std::mutex mutex_;
  std::map<int, pid_t> pids_;
  std::vector<int> ended_;
};

// Ranks' lines and exits as frames, batched per flush.
class AgentOutput : public JobOutput {
 public:
  AgentOutput(FrameWriter& writer, RunningRanks& ranks) : writer_(writer), ranks_(ranks) {}
  void rank_started(int rank, pid_t pid) override { ranks_.started(rank, pid); }
  void line(int rank, OutputStream stream, std::string_view text) override {
    pending_ += encode_frame({stream == OutputStream::Stdout ? FrameKind::Out : FrameKind::Err,
                              rank, std::string(text)});
    if (pending_.size() > (1 << 16)) flush();
  }
  void flush() override {
    writer_.write_all(pending_);
    pending_.clear();
  }
  void rank_ended(int rank, const ExitStatus& status) override {
    ranks_.ended(rank);
    flush();
    writer_.send({FrameKind::Exit, rank, exit_to_json(status)});
  }

 private:
  FrameWriter& writer_;
  RunningRanks& ranks_;
  std::string pending_;
};

// The fences of a run's MPI ranks on this node, carried through the head: this node's part
// goes out in a Fence frame; every node's parts come back in a Fenced frame, which the
// head link's reading thread hands over here (waking the job's loop).
class HeadExchange : public FenceExchange {
 public:
  HeadExchange(FrameWriter& writer, int run) : writer_(writer), run_(run) {
    if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw Error(ErrorKind::Runtime, "cannot create a pipe");
  }
  ~HeadExchange() override {
    for (int fd : wake_) close(fd);
  }
  HeadExchange(const HeadExchange&) = delete;
  HeadExchange& operator=(const HeadExchange&) = delete;

  void contribute(std::string_view protocol, int number, std::string part) override {
    writer_.send(fence_frame(run_, {std::string(protocol), number, std::move(part)}));
  }
  std::optional<std::vector<std::string>> completed(std::string_view protocol, int number) override {
    char drain[64];
    while (read(wake_[0], drain, sizeof drain) > 0) {
    }
    std::lock_guard lock(mutex_);
    for (auto it = arrived_.begin(); it != arrived_.end(); ++it)
      if (it->first.protocol == protocol && it->first.number == number) {
        std::vector<std::string> parts = std::move(it->second);
        arrived_.erase(it);
        return parts;
      }
    return std::nullopt;
  }
  int ready_fd() const override { return wake_[0]; }

  void fetch(int id, int rank) override { writer_.send({FrameKind::Fetch, run_, encode_fetch(id, rank)}); }
  std::optional<Fetched> fetched(int id) override {
    std::lock_guard lock(mutex_);
    const auto it = answers_.find(id);
    if (it == answers_.end()) return std::nullopt;
    Fetched answer = std::move(it->second);
    answers_.erase(it);
    return answer;
  }
  std::vector<std::pair<int, int>> take_fetch_requests() override {
    std::lock_guard lock(mutex_);
    std::vector<std::pair<int, int>> out;
    out.swap(requests_);
    return out;
  }
  void answer_fetch(int request, int status, std::string data) override {
    if (data.size() > kMaxFenceBytes) writer_.send({FrameKind::Fetched, run_, encode_fetched(request, kPmixErrNoMem, "")});
    else writer_.send({FrameKind::Fetched, run_, encode_fetched(request, status, data)});
  }

  // From the reading thread: a frame of this run's fences or fetches. A payload that is not
  // one is dropped: the ranks waiting on it meet the job's timeout.
  void heard(const Frame& frame) {
    try {
      std::lock_guard lock(mutex_);
      if (frame.kind == FrameKind::Fenced) {
        arrived_.push_back(decode_fenced(frame.payload));
      } else if (frame.kind == FrameKind::Fetch) {
        requests_.push_back(decode_fetch(frame.payload));
      } else {
        auto [id, status, data] = decode_fetched(frame.payload);
        answers_[id] = Fetched{status, std::move(data)};
      }
    } catch (const Error&) {
      return;
    }
    const char byte = 1;
    (void)!write(wake_[1], &byte, 1);
  }

 private:
  FrameWriter& writer_;
  int run_;
  int wake_[2] = {-1, -1};
  std::mutex mutex_;
  std::deque<std::pair<FencePart, std::vector<std::string>>> arrived_;
  std::vector<std::pair<int, int>> requests_;  // other nodes' fetches: (request, rank)
  std::map<int, Fetched> answers_;             // to this node's fetches, by id
};

// Two TCP ports free on this node right now: rank 0's rendezvous (torch, JAX) listens on
// them when this node holds rank 0.
std::vector<int> two_free_ports() { return {find_free_tcp_port(), find_free_tcp_port()}; }

}  // namespace

NodeHello describe_this_node(const Topology& topology, int probe_port, const std::string& probe_secret) {
  NodeHello hello;
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  hello.hostname = name;
  hello.name_resolves = name_resolves_within(hello.hostname, std::chrono::milliseconds(1000));
  hello.neighbour_limit = read_neighbour_table().limit;
  hello.version = MUSTER_VERSION;
  hello.machine_id = first_line_of("/etc/machine-id");
  hello.boot_id = first_line_of("/proc/sys/kernel/random/boot_id");
  hello.gpus = int(topology.gpus.size());
  for (const auto& g : topology.gpus) hello.gpu_models.push_back(g.model);
  hello.cpus = topology.pus;
  hello.free_ports = two_free_ports();
  hello.probe_port = probe_port;
  hello.probe_secret = probe_secret;
  hello.addresses = local_addresses();
  for (auto& a : hello.addresses) a.line_rate_gbps = interface_line_rate_gbps(a.interface);
  hello.nics = int(topology.nics.size());
  if (!topology.gpus.empty() && topology.gpus.size() + topology.nics.size() <= kMostPathDevices)
    hello.paths = path_matrix(topology);
  for (const auto& nic : topology.nics)
    if (std::find(nic.interfaces.begin(), nic.interfaces.end(), nic.name) == nic.interfaces.end()) hello.rdma = true;
  for (const auto& n : topology.numa_nodes) hello.memory_bytes += n.memory_bytes;
  utsname u{};
  if (uname(&u) == 0) hello.kernel = u.release;
  hello.pmix_unavailable = PmixService::unavailable_here();
  return hello;
}

namespace {

// Probes the given addresses of other nodes one after the other; the head's schedule makes
// sure this node is in one measurement at a time.
std::string answer_probe(const nlohmann::json& ask) {
  nlohmann::json results = nlohmann::json::array();
  std::optional<std::chrono::milliseconds> bulk;
  if (ask.value("bulk_ms", 0) > 0) bulk = std::chrono::milliseconds(ask.at("bulk_ms").get<int>());
  // The head waits for this ask a while past its budget: no address starts after it, so the
  // answer always comes while the head still holds the pair's nodes for it.
  const auto budget = std::chrono::milliseconds(std::clamp<int64_t>(ask.value("budget_ms", int64_t(0)), 0, 3'600'000));
  const auto stop_at = std::chrono::steady_clock::now() + budget;
  for (const auto& t : ask.at("targets")) {
    if (budget.count() > 0 && std::chrono::steady_clock::now() >= stop_at) {
      // Not measured is not unreachable: the head tries it again, and says "unknown" if
      // it never gets its turn.
      results.push_back({{"address", t.at("address")}, {"reachable", false},
                         {"error", "not probed"},
                         {"starved", fmt::format("the ask's {} ms ran out before this address", budget.count())},
                         {"rtt_us", {{"min", 0.0}, {"median", 0.0}, {"p99", 0.0}, {"samples", 0}}}});
      continue;
    }
    ProbeResult r = probe_peer(t.at("address"), t.at("port"), t.at("secret"), ask.at("count"),
                               std::chrono::milliseconds(ask.at("timeout_ms").get<int>()), bulk);
    nlohmann::json one = {{"address", t.at("address")}, {"reachable", r.reachable},
                          {"error", r.error},
                          {"rtt_us", {{"min", r.rtt.min_us}, {"median", r.rtt.median_us},
                                      {"p99", r.rtt.p99_us}, {"samples", r.rtt.samples}}}};
    if (r.gbps) one["gbps"] = *r.gbps;
    if (!r.starved.empty()) one["starved"] = r.starved;
    if (r.dropped) one["dropped"] = r.dropped;
    // The head weighs another node's starved failure to reach this one against these.
    if (const auto pressure = read_cpu_pressure_avg10()) one["cpu_pressure"] = *pressure;
    if (const auto stalled = read_cpu_shortage().stalled_us) one["cpu_stalled_us"] = *stalled;
    results.push_back(one);
  }
  return json_text(results);
}

// The node's health checks answer within this, a hung one naming itself, before the head
// stops waiting (20 s): a wedged GPU's NVML never returns.
constexpr std::chrono::seconds kAgentHealthDeadline{15};

// How long the head may give a node to read its ranks' stacks, at most.
constexpr int kMaxStacksLimitMs = 30000;

// The stacks of the current run's ranks on this node, merged, read within the ask's
// "limit_ms". Reaping waits while one rank is read (this thread is its tracer), and only
// then: the main loop reaps, forwards output and takes stop requests between ranks.
std::string answer_stacks(const nlohmann::json& ask, RunningRanks& ranks, PosixSpawner& spawner) {
  const int limit_ms = std::clamp(ask.value("limit_ms", 5000), 100, kMaxStacksLimitMs);
  const auto [running, ended] = ranks.now();
  // Not reaped while held: a rank still our child is the rank, its number not reused.
  const std::vector<std::pair<int, pid_t>> by_rank(running.begin(), running.end());
  return to_json(read_rank_stacks(by_rank, ended, std::chrono::milliseconds(limit_ms), [&](const auto& read) {
    auto hold = spawner.hold_reaping();
    read();
  }));
}

// A request the agent cannot answer gets an answer saying why: the agent itself goes on.
std::string answer(const std::string& payload, RunningRanks& ranks, PosixSpawner& spawner) {
  try {
    auto ask = parse_untrusted_json(payload);
    const std::string op = ask.at("op");
    if (op == "stacks") return answer_stacks(ask, ranks, spawner);
    if (op == "probe") return answer_probe(ask);
    if (op == "health")  // as `muster health` on the node: its own record and counters' baseline too
      return to_json(check_node_against_its_record(health_root_of_this_node(), node_gpu_libraries(),
                                                   expectations_from_request(payload), kAgentHealthDeadline,
                                                   "GPU libraries not asked", health_state_dir()));
    if (op == "health_counters") return counters_to_json(read_health_counters(health_root_of_this_node()));
    if (op == "ports") return nlohmann::json{{"ports", two_free_ports()}}.dump();
    if (op == "clock")
      return nlohmann::json{{"unix_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::system_clock::now().time_since_epoch())
                                            .count()}}
          .dump();
    return json_text({{"error", "unknown request '" + op + "'"}});
  } catch (const std::exception& e) {
    return json_text({{"error", e.what()}});  // it may quote bytes that are not UTF-8
  }
}

// The agent's side of the channel to the head, on threads of its own: one reads every frame
// the head sends (and notices silence) and never writes, one sends a heartbeat every second,
// one answers requests. The main thread takes the jobs (specs) from it, one at a time.
class HeadLink {
 public:
  HeadLink(int in_fd, FrameWriter& writer, std::chrono::milliseconds silence_limit, RunningRanks& ranks,
           PosixSpawner& spawner)
      : in_fd_(in_fd), writer_(writer), silence_limit_(silence_limit), ranks_(ranks), spawner_(spawner) {
    for (int* p : {ready_, stop_})
      if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
        throw Error(ErrorKind::Runtime, "cannot create a pipe");
    reader_ = signal_free_thread([this] { read_frames(); });
    beater_ = signal_free_thread([this] { send_beats(); });
    // Under the lock: an ask may be waiting already, and the answerer that takes it grows
    // answerers_ (ThreadSanitizer saw the two writes meet).
    std::lock_guard lock(mutex_);
    answerers_.push_back(signal_free_thread([this] { answer_asks(); }));
  }
  ~HeadLink() {
    {
      std::lock_guard lock(mutex_);
      quitting_ = true;
    }
    writer_.head_lost();  // a beat or an answer waiting on a head that stopped reading gives up
    changed_.notify_all();
    for (auto* t : {&reader_, &beater_}) t->join();
    for (auto& t : answerers_) t.join();  // none is added once quitting_ is set
    for (int* p : {ready_, stop_})
      for (int i = 0; i < 2; ++i) close(p[i]);
  }

  // Readable when a job arrived or the head is gone.
  int ready_fd() const { return ready_[0]; }

  // The next job and its run id, if one arrived.
  std::optional<std::pair<int, NodeLaunchSpec>> take_spec() {
    char drain[64];
    while (read(ready_[0], drain, sizeof drain) > 0) {}
    std::lock_guard lock(mutex_);
    if (specs_.empty()) return std::nullopt;
    auto next = std::move(specs_.front());
    specs_.pop_front();
    return next;
  }

  bool gone() const {
    std::lock_guard lock(mutex_);
    return gone_;
  }

  // Starts run `id`: the returned fd yields a byte per stop request for it (a Stop frame, or
  // the head lost). A Stop that arrived before the run started still stops it.
  // Fenced frames for it go to `exchange` until end_run().
  int begin_run(int id, HeadExchange& exchange) {
    char drain[64];
    while (read(stop_[0], drain, sizeof drain) > 0) {}
    std::lock_guard lock(mutex_);
    current_run_ = id;
    exchange_ = &exchange;
    if (stopped_up_to_ >= id || gone_) wake(stop_[1], SIGTERM);
    return stop_[0];
  }
  // Whether the head asked run `id` to stop (as opposed to a signal sent to the agent).
  bool stop_requested(int id) const {
    std::lock_guard lock(mutex_);
    return stopped_up_to_ >= id || gone_;
  }
  void end_run() {
    std::lock_guard lock(mutex_);
    current_run_ = -1;
    exchange_ = nullptr;
  }

 private:
  static void wake(int fd, unsigned char why) { [[maybe_unused]] auto n = write(fd, &why, 1); }

  // Reads until the head says goodbye, the channel closes, garbage arrives or nothing at all
  // arrives for the silence limit (the network to the head is gone).
  void read_frames() {
    FrameReader reader(kMaxHeadFramePayload);
    char buffer[65536];
    auto last_heard = Clock::now();
    std::string why;
    try {
      while (why.empty()) {
        while (auto frame = reader.next())
          if (!handle(*frame)) why = "the head said goodbye";
        if (!why.empty()) break;
        {
          std::lock_guard lock(mutex_);
          if (quitting_) return;
        }
        pollfd p{in_fd_, POLLIN, 0};
        int ready = poll(&p, 1, 200);
        if (ready < 0 && errno != EINTR) why = "the channel to the head failed";
        if (ready <= 0) {
          if (Clock::now() - last_heard > silence_limit_) why = "the head fell silent";
          continue;
        }
        ssize_t n = read(in_fd_, buffer, sizeof buffer);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) why = "the channel to the head closed";
        else reader.feed(std::string_view(buffer, size_t(n)));
        last_heard = Clock::now();
      }
    } catch (const Error&) {
      why = "the head sent something that is not muster's protocol";
    } catch (const std::exception& e) {  // no memory for a frame: the agent is done either way
      why = std::string("the agent could not read the head: ") + e.what();
    }
    std::lock_guard lock(mutex_);
    gone_ = true;
    writer_.head_lost();
    if (current_run_ >= 0) wake(stop_[1], SIGHUP);
    wake(ready_[1], 1);
    changed_.notify_all();
  }

  // One frame from the head; false when it ends the session.
  bool handle(Frame& frame) {
    std::lock_guard lock(mutex_);
    // What the head asks waits here to be answered: far more of it than the head ever has
    // outstanding is not muster (Stop and Bye are always heard).
    const bool queued = frame.kind == FrameKind::Ask || frame.kind == FrameKind::Spec;
    if (queued && asks_.size() + replies_.size() + specs_.size() >= kMaxPendingFromHead)
      throw Error(ErrorKind::Runtime, "too many requests unanswered");
    switch (frame.kind) {
      case FrameKind::Spec:
        try {
          specs_.emplace_back(frame.rank, node_launch_spec_from_json(frame.payload));
          wake(ready_[1], 1);
        } catch (const Error& e) {
          // This run only. Said by the answering thread: this one never writes, so that a
          // head that stops reading cannot keep it from hearing Stop, Bye or a closed channel.
          replies_.push_back({FrameKind::Fail, frame.rank, e.what()});
          changed_.notify_all();
        }
        break;
      case FrameKind::Stop:
        stopped_up_to_ = std::max(stopped_up_to_, frame.rank);
        if (frame.rank == current_run_) wake(stop_[1], SIGTERM);  // again: SIGKILL at once
        break;
      case FrameKind::Ask:
        asks_.push_back(std::move(frame));
        changed_.notify_all();
        break;
      case FrameKind::Fenced:
      case FrameKind::Fetch:
      case FrameKind::Fetched:
        if (frame.rank == current_run_ && exchange_) exchange_->heard(frame);
        break;
      case FrameKind::Bye: return false;
      default: break;  // heartbeats only prove the head is alive
    }
    return true;
  }

  void send_beats() {
    std::unique_lock lock(mutex_);
    while (!quitting_ && !gone_) {
      lock.unlock();
      writer_.send({FrameKind::Beat, -1, ""});
      lock.lock();
      changed_.wait_for(lock, std::chrono::seconds(1), [&] { return quitting_ || gone_; });
    }
  }

  // Answers requests, and sends what the reading thread has to say. Asks are answered side by
  // side: the rendezvous node of a launch is asked to probe every peer at once, and a probe
  // waits on the network. So one answering thread is kept idle for the next ask: another
  // starts whenever the last idle one takes an ask, up to kMostAnswering.
  void answer_asks() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return quitting_ || gone_ || !asks_.empty() || !replies_.empty(); });
      if (quitting_ || gone_) return;
      if (!replies_.empty()) {
        Frame reply = std::move(replies_.front());
        replies_.pop_front();
        lock.unlock();
        writer_.send(reply);
        lock.lock();
        continue;
      }
      Frame ask = std::move(asks_.front());
      asks_.pop_front();
      ++answering_;
      if (answering_ == answerers_.size() && answerers_.size() < kMostAnswering)
        answerers_.push_back(signal_free_thread([this] { answer_asks(); }));
      lock.unlock();
      try {
        writer_.send({FrameKind::Answer, ask.rank, answer(ask.payload, ranks_, spawner_)});
      } catch (const std::exception&) {
        // answer() says its own failures; this is memory running out: the ask goes unanswered
      }
      lock.lock();
      --answering_;
    }
  }

  static constexpr size_t kMaxPendingFromHead = 1024;
  // As many as the head may ask of the rendezvous node at once, and one more for the rest.
  static constexpr size_t kMostAnswering = size_t(PairScheduler::Limits{}.hub_pairs) + 1;

  int in_fd_;
  FrameWriter& writer_;
  std::chrono::milliseconds silence_limit_;
  RunningRanks& ranks_;
  PosixSpawner& spawner_;
  int ready_[2] = {-1, -1};  // a byte: a spec arrived, or the head is gone
  int stop_[2] = {-1, -1};   // a byte per stop request for the current run
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::pair<int, NodeLaunchSpec>> specs_;
  std::deque<Frame> asks_;
  std::deque<Frame> replies_;  // for the head, from the reading thread
  int current_run_ = -1;
  HeadExchange* exchange_ = nullptr;  // the current run's
  int stopped_up_to_ = -1;
  bool gone_ = false;
  bool quitting_ = false;
  std::thread reader_, beater_;
  std::vector<std::thread> answerers_;  // grown by answer_asks, under mutex_
  size_t answering_ = 0;                // answerers busy with an ask
};

// Runs one job's ranks on this node as the local launcher does, and reports how it ended.
// Returns false when the agent itself was told to stop by a signal (not by the head).
bool run_job(int id, const NodeLaunchSpec& spec, const Topology& topology, HeadLink& head,
             FrameWriter& writer, ProcessSpawner& spawner, RunningRanks& running, const ShutdownSignals& signals) {
  const Environment base = node_environment();
  // The caller's directory may not exist here (a disk of its own): the node decides, and
  // says so in its Bound frame, so the head warns once for every node that did.
  LaunchRequest request = spec.request;
  const NodeWorkdir workdir = node_workdir(request, base);
  request.workdir = workdir.path;
  std::vector<RankProcess> ranks = rank_processes_for_node(spec.node, request, base, topology);
  // What the ranks' MPI library is served, its fences carried through the head.
  HeadExchange exchange(writer, id);
  std::vector<std::string> mpi_warnings;
  std::unique_ptr<RankService> mpi;
  try {
    if (spec.request.mpi && !spec.node.ranks.empty())
      mpi = serve_mpi(*spec.request.mpi, spec.request.mpi->node_of_rank[size_t(spec.node.ranks.front().rank)],
                      exchange, mpi_warnings);
  } catch (const Error& e) {
    writer.send({FrameKind::Fail, id, e.what()});
    return true;
  }
  writer.send({FrameKind::Bound, -1, to_json(NodeBound{binding_reports(ranks, topology), workdir.went_home})});
  running.clear();
  AgentOutput output(writer, running);
  const int stop_fd = head.begin_run(id, exchange);
  // However the run ends (an exception too), the link forgets it before `exchange` goes.
  struct RunEnds {
    HeadLink& head;
    ~RunEnds() { head.end_run(); }
  } run_ends{head};
  JobResult result = run_local_job(spawner, ranks, spec.teardown, output, {stop_fd, signals.fd()},
                                   job_markers(spec.request.job, spec.node.node_rank), mpi.get());
  output.flush();
  const bool signalled = result.end == JobEnd::Interrupted && !head.stop_requested(id);
  // The head names the fence a timeout found the ranks in, and the nodes that had not all
  // entered it; this node says which of its own had not.
  if (mpi && head.stop_requested(id))
    if (std::string waiting = mpi->waiting_on(); !waiting.empty())
      result.notes.push_back("when the job was stopped its ranks were waiting in " + waiting);
  for (auto& warning : mpi_warnings) result.notes.push_back(std::move(warning));
  writer.send({FrameKind::Done, id, to_json(node_run_report(result))});
  return !signalled;
}

// This node as the job sees it: only the GPUs the job holds count (Slurm's step GPUs, or
// CUDA_VISIBLE_DEVICES).
Topology this_node_for_the_job(TopologySource& discovery) {
  const Topology whole = discovery.load();
  return restrict_to_job(whole, job_gpus(whole.gpus, Environment::current()));
}

// What the agent knows of its node before its hello.
struct NodeAtStart {
  HwlocTopologySource discovery{std::nullopt, PciWalk::OnlyWithGpus};  // kept for PMIx's server
  Topology topology = this_node_for_the_job(discovery);
  std::string probe_secret = new_job_secret();
  ProbeServer probe_server{probe_secret};  // other nodes measure their way here
};

}  // namespace

bool pmix_may_borrow(const Topology& topology, const NodeHello& hello) {
  return topology.pci_walked || !hello.rdma;
}

int run_agent(const std::function<HeadChannel()>& reach_head, const AgentSettings& settings) {
  // 1. Look at this node while it reaches the head (a call back over TCP under Slurm): both
  //    lie on every job's path. What fails here is said to the head once it is reached.
  std::optional<HeadChannel> channel;
  std::exception_ptr unreachable;
  std::thread caller = signal_free_thread([&] {
    try {
      channel = reach_head();
    } catch (...) {
      unreachable = std::current_exception();
    }
  });
  std::optional<NodeAtStart> node;
  std::exception_ptr node_failed;
  try {
    node.emplace();
  } catch (...) {
    node_failed = std::current_exception();
  }
  caller.join();
  if (unreachable) std::rethrow_exception(unreachable);

  FrameWriter writer(channel->out_fd);
  auto say_failure = [&](const std::exception& e) {
    writer.send({FrameKind::Fail, -1, e.what()});
    return 1;
  };
  try {
    if (node_failed) std::rethrow_exception(node_failed);
    const Topology& topology = node->topology;
    ShutdownSignals signals;   // SIGHUP from sshd, SIGTERM from an admin: stop the ranks too
    PosixSpawner spawner;
    // The probe secret reaches the head in the hello, over SSH or the proven call back.
    const NodeHello hello = describe_this_node(topology, node->probe_server.port(), node->probe_secret);
    writer.send({FrameKind::Hello, -1, to_json(hello)});
    RunningRanks running;
    HeadLink head(channel->in_fd, writer, settings.head_silence_limit, running, spawner);
    // PMIx's server starts while the head checks the network and plans, so that a job of MPI
    // ranks does not wait for it. After the link's threads started, which answer the network
    // check's probes meanwhile.
    if (hello.pmix_unavailable.empty())
      PmixService::start_server(pmix_may_borrow(topology, hello) ? node->discovery.hwloc_topology() : nullptr);

    // 2. Jobs, one at a time, until the head says goodbye or is lost. A failure is said while
    //    the link stands: its end gives the writer up (for a head that stopped reading).
    try {
      for (;;) {
        pollfd fds[2] = {{head.ready_fd(), POLLIN, 0}, {signals.fd(), POLLIN, 0}};
        if (poll(fds, 2, -1) < 0 && errno != EINTR) return 1;
        if (fds[1].revents) return 0;  // told to stop with nothing running
        auto next = head.take_spec();
        if (next) {
          if (!run_job(next->first, next->second, topology, head, writer, spawner, running, signals)) return 0;
        } else if (head.gone()) {
          return 0;
        }
      }
    } catch (const std::exception& e) {
      return say_failure(e);
    }
  } catch (const std::exception& e) {
    return say_failure(e);
  }
}

}  // namespace muster
