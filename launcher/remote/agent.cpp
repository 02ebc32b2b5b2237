#include "launcher/remote/agent.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <fstream>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/remote/agent_protocol.h"
#include "launcher/error.h"
#include "launcher/remote/launch_spec.h"
#include "launcher/local/posix_spawner.h"
#include "launcher/local/shutdown_signals.h"
#include "probes/free_port.h"
#include "probes/interfaces.h"
#include "probes/tcp_probe.h"
#include "topology/topology_source.h"

namespace muster {
namespace {

// Frames to the head; whole frames only, from one thread at a time.
class FrameWriter {
 public:
  explicit FrameWriter(int fd) : fd_(fd) {}
  void send(const Frame& frame) { write_all(encode_frame(frame)); }
  void write_all(std::string_view bytes) {
    std::lock_guard lock(mutex_);
    while (!bytes.empty()) {
      ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // the head is gone; teardown goes on without it
      bytes.remove_prefix(size_t(n));
    }
  }

 private:
  int fd_;
  std::mutex mutex_;
};

// Ranks' lines and exits as frames, batched per flush.
class AgentOutput : public JobOutput {
 public:
  explicit AgentOutput(FrameWriter& writer) : writer_(writer) {}
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
    flush();
    writer_.send({FrameKind::Exit, rank,
                  nlohmann::json{{"signal", status.kind == ExitStatus::Kind::Signaled},
                                 {"code", status.kind == ExitStatus::Kind::Signaled
                                              ? status.signal : status.code}}.dump()});
  }

 private:
  FrameWriter& writer_;
  std::string pending_;
};

std::string first_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

NodeHello describe_this_node(const Topology& topology, int probe_port) {
  NodeHello hello;
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  hello.hostname = name;
  hello.version = MUSTER_VERSION;
  hello.machine_id = first_line_of("/etc/machine-id");
  hello.boot_id = first_line_of("/proc/sys/kernel/random/boot_id");
  hello.gpus = int(topology.gpus.size());
  for (const auto& g : topology.gpus) hello.gpu_models.push_back(g.model);
  hello.cpus = topology.pus;
  // If this node is node 0, rank 0's rendezvous (torch, JAX) listens on these.
  hello.free_ports = {find_free_tcp_port(), find_free_tcp_port()};
  hello.probe_port = probe_port;
  hello.addresses = local_addresses();
  hello.nics = int(topology.nics.size());
  for (const auto& n : topology.numa_nodes) hello.memory_bytes += n.memory_bytes;
  utsname u{};
  if (uname(&u) == 0) hello.kernel = u.release;
  return hello;
}

// Probes the given addresses of other nodes one after the other; the head's schedule makes
// sure this node is in one measurement at a time.
std::string answer_probe(const nlohmann::json& ask) {
  nlohmann::json results = nlohmann::json::array();
  std::optional<std::chrono::milliseconds> bulk;
  if (ask.value("bulk_ms", 0) > 0) bulk = std::chrono::milliseconds(ask.at("bulk_ms").get<int>());
  for (const auto& t : ask.at("targets")) {
    ProbeResult r = probe_peer(t.at("address"), t.at("port"), ask.at("count"),
                               std::chrono::milliseconds(ask.at("timeout_ms").get<int>()), bulk);
    nlohmann::json one = {{"address", t.at("address")}, {"reachable", r.reachable},
                          {"error", r.error},
                          {"rtt_us", {{"min", r.rtt.min_us}, {"median", r.rtt.median_us},
                                      {"p99", r.rtt.p99_us}, {"samples", r.rtt.samples}}}};
    if (r.gbps) one["gbps"] = *r.gbps;
    results.push_back(one);
  }
  return results.dump();
}

std::string answer(const std::string& payload) {
  auto ask = nlohmann::json::parse(payload);
  const std::string op = ask.at("op");
  if (op == "probe") return answer_probe(ask);
  if (op == "clock")
    return nlohmann::json{{"unix_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count()}}
        .dump();
  throw Error(ErrorKind::Runtime, "unknown request '" + op + "'");
}

// The head plans and probes before it sends the spec; a large ping can take a while.
constexpr std::chrono::milliseconds kSpecWaitLimit{std::chrono::minutes(2)};

// Answers the head's requests until a Spec arrives; nullopt when the head went away.
std::optional<NodeLaunchSpec> receive_spec(int in_fd, FrameReader& reader, FrameWriter& writer) {
  char buffer[65536];
  for (;;) {
    while (auto frame = reader.next()) {
      if (frame->kind == FrameKind::Spec) return node_launch_spec_from_json(frame->payload);
      if (frame->kind == FrameKind::Stop) return std::nullopt;
      if (frame->kind == FrameKind::Ask)
        writer.send({FrameKind::Answer, frame->rank, answer(frame->payload)});
    }
    pollfd p{in_fd, POLLIN, 0};
    if (poll(&p, 1, int(kSpecWaitLimit.count())) <= 0)
      return std::nullopt;  // no spec in time: the head is not coming back
    ssize_t n = read(in_fd, buffer, sizeof buffer);
    if (n <= 0) return std::nullopt;
    reader.feed(std::string_view(buffer, size_t(n)));
  }
}

// Watches the head while ranks run: a Stop frame, end of file or silence becomes a stop
// request on `stop_fd` (SIGTERM for a stop, SIGHUP for a lost head).
void watch_head(int in_fd, FrameReader reader, int stop_fd) {
  char buffer[4096];
  unsigned char why = SIGHUP;
  try {
    for (bool running = true; running;) {
      while (auto frame = reader.next())
        if (frame->kind == FrameKind::Stop) {
          why = SIGTERM;
          running = false;
        }
      if (!running) break;
      pollfd p{in_fd, POLLIN, 0};
      int ready = poll(&p, 1, int(std::chrono::milliseconds(kHeadSilenceLimit).count()));
      if (ready <= 0) break;  // silence: the network to the head is gone
      ssize_t n = read(in_fd, buffer, sizeof buffer);
      if (n <= 0) break;      // the control channel closed: the head is gone
      reader.feed(std::string_view(buffer, size_t(n)));
    }
  } catch (const Error&) {
    // Garbage from the head is as good as no head: stop the ranks.
  }
  [[maybe_unused]] auto n = write(stop_fd, &why, 1);
}

}  // namespace

int run_agent(int in_fd, int out_fd) {
  FrameWriter writer(out_fd);
  try {
    // 1. Say what this node is, so the head can plan (GPU counts) and check identity.
    Topology topology = HwlocTopologySource().load();
    ProbeServer probe_server;  // other nodes measure their way here while the head asks
    writer.send({FrameKind::Hello, -1, to_json(describe_this_node(topology, probe_server.port()))});

    // 2. Wait for this node's part of the job.
    FrameReader reader;
    std::optional<NodeLaunchSpec> spec = receive_spec(in_fd, reader, writer);
    if (!spec) return 0;  // the head changed its mind or went away: nothing was started

    // 3. Start the ranks as the local launcher does, and supervise them while watching the head.
    std::vector<RankProcess> ranks = rank_processes_for_node(
        spec->plan, spec->node_rank, spec->request, Environment::current(), topology);
    writer.send({FrameKind::Bound, -1, bindings_to_json(binding_reports(ranks, topology))});
    int stop_pipe[2];
    if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
      throw Error(ErrorKind::Runtime, "cannot create a pipe");
    std::thread(watch_head, in_fd, std::move(reader), stop_pipe[1]).detach();
    ShutdownSignals signals;  // SIGHUP from sshd, SIGTERM from an admin: stop the ranks too
    PosixSpawner spawner;
    AgentOutput output(writer);
    JobResult result = run_local_job(spawner, ranks, spec->teardown, output,
                                     {stop_pipe[0], signals.fd()},
                                     job_markers(spec->request.job, spec->node_rank));
    output.flush();

    // 4. Report how the node ended, including anything that would not die.
    nlohmann::json done = {{"start_error", result.start_error},
                           {"escaped", result.escaped_killed},
                           {"stuck", nlohmann::json::array()}};
    for (const auto& s : result.stuck)
      done["stuck"].push_back({{"rank", s.rank}, {"process", s.description}});
    writer.send({FrameKind::Done, -1, done.dump()});
    return 0;
  } catch (const std::exception& e) {
    writer.send({FrameKind::Fail, -1, e.what()});
    return 1;
  }
}

}  // namespace muster
