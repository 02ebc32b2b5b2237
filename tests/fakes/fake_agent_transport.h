// An SshTransport whose nodes run a scripted muster agent in memory: it says hello, answers
// requests, and "runs" each job by reporting every rank's scripted exit, speaking the real
// frame protocol. It can refuse connections, never say hello, die or fall silent at a given
// job. Every connection and every command started is recorded.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/remote/agent_protocol.h"
#include "launcher/remote/launch_spec.h"
#include "launcher/remote/ssh_transport.h"

namespace muster::testing {

struct FakeAgentNode {
  bool refuse = false;              // connect() fails: connection refused
  bool never_says_hello = false;    // the agent starts, then says nothing at all
  bool shell_hangs = false;         // the node's shell never gets to muster's start command
  int dies_at_run = 0;              // the channel ends when the spec of this job (1, 2, ...) arrives
  int silent_from_run = 0;          // from the spec of this job on, nothing is sent (no heartbeats)
  int stderr_mib_as_it_dies = 0;    // at dies_at_run, this much stderr, then its last words
  int gpus = 0;
  bool ranks_wait_for_stop = false; // a job's ranks run until the head stops them
  std::string prints;               // each job's first rank prints this line
  // The job's directory is missing here: a spec that allows it gets a Bound frame saying its
  // ranks start in $HOME. Every spec's directory is kept in `workdirs`.
  bool lacks_workdir = false;
  mutable std::vector<std::optional<std::string>> workdirs;  // written by the fake agent
  // Each rank's exit code in the node's n-th job (1-based); 0 unless it says otherwise.
  std::function<int(int job, int rank)> exit_code = [](int, int) { return 0; };
  // Scripted words, for fuzzing what the head makes of them: the hello's payload, the answer
  // to each request (by its "op"), and the frames a job's spec gets before its Done (whose
  // payload is `done`). Unset: the fake's own well-formed ones.
  std::optional<std::string> hello;
  std::function<std::string(const std::string& op)> answer;
  std::optional<std::vector<Frame>> job_frames;
  std::string done = R"({"start_error":"","escaped":0,"stuck":[]})";
  // The node's addresses, as its hello lists them, and whether its probe of a peer's address
  // gets an answer: `reaches(address, attempt)`, where attempt counts this node's probes of
  // that address from 1.
  std::vector<LocalAddress> addresses;
  std::optional<bool> name_resolves = true;  // as the hello says
  std::optional<std::uint64_t> neighbour_limit = 1024;
  // Whether its channel has a descriptor the head can poll(2), as an SSH socket is: without
  // one the head looks at the channel every few milliseconds (what a benchmark of thousands
  // of fake nodes would measure instead of the head).
  bool gives_wait_fd = false;
  // Why a probe that failed was starved, as the agent would say it ("": it was not).
  std::function<std::string(const std::string& address, int attempt)> starved = [](const std::string&, int) {
    return std::string();
  };
  // Its CPU pressure over the last 10 s (a fraction), in each probe answer; unset: not said.
  std::optional<double> cpu_pressure = 0.0;
  // Its /proc/pressure/cpu "some" total (us) in each probe answer; unset: not said.
  std::function<std::optional<std::uint64_t>()> cpu_stalled_us = [] { return std::nullopt; };
  // Packets its kernel dropped during each of its probes.
  std::uint64_t dropped_per_probe = 0;
  // Asked for its health, it never answers (a check hung in its agent), though alive.
  bool health_hangs = false;
  // Its agent ends (its channel closes) as it gets this probe request, counted from 1; 0: never.
  int dies_at_probe = 0;
  std::function<bool(const std::string& address, int attempt)> reaches = [](const std::string&, int) {
    return true;
  };
  // The bandwidth of its stream to a peer's address, when the probe asks for one (bulk_ms).
  std::function<double(const std::string& address, int attempt)> gbps = [](const std::string&, int) {
    return 10.0;
  };
};

class FakeAgentTransport : public SshTransport {
 public:
  std::map<std::string, FakeAgentNode> nodes;  // by address

  int connections() const { return connections_; }
  int agents_started() const { return agents_; }
  std::vector<std::string> commands() {
    std::lock_guard lock(mutex_);
    return commands_;
  }
  // "HOST KIND" for every frame an agent received (heartbeats left out), in order.
  std::vector<std::string> frames_received() {
    std::lock_guard lock(mutex_);
    return frames_;
  }

  std::unique_ptr<SshConnection> connect(const SshTarget& target) override {
    const FakeAgentNode& node = nodes.at(target.address);
    if (node.refuse) throw SshError(SshFailure::ConnectionRefused, target.host, "scripted refusal");
    ++connections_;
    return std::make_unique<Connection>(*this, target.host, node);
  }

 private:
  // A setup command: the shipping probe finds muster on the PATH; anything else succeeds.
  class SetupCommand : public RemoteCommand {
   public:
    explicit SetupCommand(std::string out) : out_(std::move(out)) {}
    void write(std::string_view) override {}
    void close_stdin() override {}
    bool read(std::string& out, std::string&, std::chrono::milliseconds) override {
      if (done_) return false;
      out += out_;
      done_ = true;
      return true;
    }
    std::optional<ExitStatus> exit_status() override { return ExitStatus::exited(0); }

   private:
    std::string out_;
    bool done_ = false;
  };

  class Agent : public RemoteCommand {
   public:
    Agent(FakeAgentTransport& owner, std::string host, const FakeAgentNode& node)
        : owner_(owner), host_(std::move(host)), node_(node) {
      if (node_.gives_wait_fd && pipe2(ready_fd_, O_CLOEXEC | O_NONBLOCK) != 0)
        throw std::runtime_error("fake agent: cannot create a pipe");
      if (node_.never_says_hello || node_.shell_hangs) return;
      NodeHello hello;
      hello.hostname = "fake";
      hello.version = MUSTER_VERSION;
      hello.gpus = node_.gpus;
      hello.gpu_models.assign(size_t(node_.gpus), "Fake GPU");
      hello.cpus = 4;
      hello.free_ports = {29500, 29501};
      hello.probe_port = 40000;
      hello.addresses = node_.addresses;
      hello.name_resolves = node_.name_resolves;
      hello.neighbour_limit = node_.neighbour_limit;
      out_ += encode_frame({FrameKind::Hello, -1, node_.hello ? *node_.hello : to_json(hello)});
      say_ready();
    }
    ~Agent() override {
      for (int fd : ready_fd_)
        if (fd >= 0) close(fd);
    }
    int wait_fd() const override { return ready_fd_[0]; }
    void write(std::string_view bytes) override {
      std::lock_guard lock(mutex_);
      reader_.feed(bytes);
      while (auto frame = reader_.next()) handle(*frame);
      ready_.notify_all();
      say_ready();
    }
    void close_stdin() override {}
    bool read(std::string& out, std::string& err, std::chrono::milliseconds limit) override {
      std::unique_lock lock(mutex_);
      if (ready_fd_[0] >= 0) {
        char drain[64];
        while (::read(ready_fd_[0], drain, sizeof drain) > 0) {}
        if (dying_mib_left_ > 1) say_ready();  // more to come
      }
      if (dying_mib_left_ > 0) {  // as much stderr as a read gives at most, each time
        static const std::string mebibyte(kMaxReadPerCall, 'e');
        err += mebibyte;
        out += encode_frame({FrameKind::Beat, -1, ""});  // alive while it floods
        if (--dying_mib_left_ == 0) {
          err += "\nmuster: agent: the last words of a dying agent\n";
          ended_ = true;
        }
        return true;
      }
      // As the real start command does, before it execs the agent.
      if (!node_.shell_hangs && !started_as_said_) out += "MUSTER-START bundle /root/.cache/muster/fake\n";
      started_as_said_ = true;
      ready_.wait_for(lock, limit, [&] { return !out_.empty() || ended_; });
      if (!silent() && !ended_ && std::chrono::steady_clock::now() - last_beat_ > std::chrono::milliseconds(200)) {
        out_ += encode_frame({FrameKind::Beat, -1, ""});
        last_beat_ = std::chrono::steady_clock::now();
      }
      if (silent()) out_.clear();
      out += out_;
      out_.clear();
      return !ended_ || !out.empty();
    }
    std::optional<ExitStatus> exit_status() override {
      return ended_ ? std::optional(ExitStatus::exited(0)) : std::nullopt;
    }

   private:
    // Makes wait_fd() readable when there is something to read (or the agent ended).
    void say_ready() {
      if (ready_fd_[1] >= 0 && (!out_.empty() || ended_ || dying_mib_left_ > 0)) {
        [[maybe_unused]] auto n = ::write(ready_fd_[1], "r", 1);
      }
    }
    bool silent() const {
      return node_.never_says_hello || node_.shell_hangs ||
             (node_.silent_from_run && jobs_ >= node_.silent_from_run);
    }
    void handle(const Frame& frame) {
      if (frame.kind != FrameKind::Beat) {
        static const char* names[] = {"HELLO", "SPEC", "STOP", "BEAT", "BYE", "ASK", "ANSWER"};
        std::lock_guard lock(owner_.mutex_);
        owner_.frames_.push_back(host_ + " " + (size_t(frame.kind) < 7 ? names[size_t(frame.kind)] : "?"));
      }
      switch (frame.kind) {
        case FrameKind::Ask: {
          auto ask = nlohmann::json::parse(frame.payload);
          if (node_.health_hangs && ask["op"] == "health") break;
          if (node_.answer) {
            out_ += encode_frame({FrameKind::Answer, frame.rank, node_.answer(ask["op"])});
            break;
          }
          nlohmann::json answer;
          if (ask["op"] == "clock")
            answer = {{"unix_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::system_clock::now().time_since_epoch()).count()}};
          else if (ask["op"] == "ports")
            answer = {{"ports", {29500, 29501}}};
          else if (ask["op"] == "probe" && ++probe_asks_ == node_.dies_at_probe) {
            ended_ = true;
            break;
          } else if (ask["op"] == "probe")
            answer = probe(ask);
          else
            answer = nlohmann::json::array();
          out_ += encode_frame({FrameKind::Answer, frame.rank, answer.dump()});
          break;
        }
        case FrameKind::Spec: {
          ++jobs_;
          if (node_.dies_at_run == jobs_) {
            dying_mib_left_ = node_.stderr_mib_as_it_dies;
            ended_ = dying_mib_left_ == 0;
            return;
          }
          if (node_.job_frames) {
            for (const Frame& f : *node_.job_frames) out_ += encode_frame(f);
            out_ += encode_frame({FrameKind::Done, frame.rank, node_.done});
            break;
          }
          NodeLaunchSpec spec = node_launch_spec_from_json(frame.payload);
          node_.workdirs.push_back(spec.request.workdir);
          out_ += encode_frame({FrameKind::Bound, -1,
                                to_json(NodeBound{{}, node_.lacks_workdir && spec.request.workdir &&
                                                          spec.request.workdir_rule == WorkdirRule::OrHome})});
          ranks_.clear();
          for (const auto& r : spec.node.ranks) ranks_.push_back(r.rank);
          if (!node_.prints.empty() && !ranks_.empty())
            out_ += encode_frame({FrameKind::Out, ranks_.front(), node_.prints});
          if (node_.ranks_wait_for_stop) break;
          for (int rank : ranks_)
            out_ += encode_frame({FrameKind::Exit, rank,
                                  nlohmann::json{{"signal", false}, {"code", node_.exit_code(jobs_, rank)}}.dump()});
          out_ += encode_frame({FrameKind::Done, frame.rank,
                                R"({"start_error":"","escaped":0,"stuck":[]})"});
          break;
        }
        case FrameKind::Stop:
          if (!node_.ranks_wait_for_stop || ranks_.empty()) break;
          for (int rank : ranks_)
            out_ += encode_frame({FrameKind::Exit, rank, R"({"signal":true,"code":15})"});
          out_ += encode_frame({FrameKind::Done, frame.rank, R"({"start_error":"","escaped":0,"stuck":[]})"});
          ranks_.clear();
          break;
        case FrameKind::Bye: ended_ = true; break;
        default: break;
      }
    }

    // As the agent answers a probe: one result per target, in the order asked.
    nlohmann::json probe(const nlohmann::json& ask) {
      nlohmann::json results = nlohmann::json::array();
      for (const auto& t : ask.at("targets")) {
        const std::string address = t.at("address");
        const int attempt = ++probes_of_[address];
        const bool reached = node_.reaches(address, attempt);
        results.push_back({{"address", address}, {"reachable", reached},
                           {"error", reached ? "" : "no answer within 2000 ms"},
                           {"rtt_us", {{"min", 40.0}, {"median", 50.0}, {"p99", 90.0},
                                       {"samples", reached ? ask.at("count").get<int>() : 0}}}});
        if (const std::string why = node_.starved(address, attempt); !reached && !why.empty())
          results.back()["starved"] = why;
        if (reached && ask.value("bulk_ms", 0) > 0) results.back()["gbps"] = node_.gbps(address, attempt);
        if (node_.cpu_pressure) results.back()["cpu_pressure"] = *node_.cpu_pressure;
        if (const auto stalled = node_.cpu_stalled_us()) results.back()["cpu_stalled_us"] = *stalled;
        if (node_.dropped_per_probe) results.back()["dropped"] = node_.dropped_per_probe;
      }
      return results;
    }

    FakeAgentTransport& owner_;
    std::string host_;
    const FakeAgentNode& node_;
    std::map<std::string, int> probes_of_;  // by address probed
    std::vector<int> ranks_;  // of the job running now
    std::mutex mutex_;
    std::condition_variable ready_;
    FrameReader reader_{kMaxHeadFramePayload};
    std::string out_;
    bool ended_ = false;
    bool started_as_said_ = false;
    int jobs_ = 0;
    int dying_mib_left_ = 0;
    std::chrono::steady_clock::time_point last_beat_{};
    int ready_fd_[2] = {-1, -1};
    int probe_asks_ = 0;
  };

  class Connection : public SshConnection {
   public:
    Connection(FakeAgentTransport& owner, std::string host, const FakeAgentNode& node)
        : owner_(owner), host_(std::move(host)), node_(node) {}
    std::unique_ptr<RemoteCommand> start(const std::string& command_line) override {
      {
        std::lock_guard lock(owner_.mutex_);
        owner_.commands_.push_back(host_ + ": " + command_line);
      }
      if (command_line.find(" agent") != std::string::npos) {
        ++owner_.agents_;
        return std::make_unique<Agent>(owner_, host_, node_);
      }
      return std::make_unique<SetupCommand>("path /usr/bin/muster\n");
    }

   private:
    FakeAgentTransport& owner_;
    std::string host_;
    const FakeAgentNode& node_;
  };

  std::mutex mutex_;
  std::vector<std::string> commands_;
  std::vector<std::string> frames_;
  std::atomic<int> connections_{0}, agents_{0};
};

}  // namespace muster::testing
