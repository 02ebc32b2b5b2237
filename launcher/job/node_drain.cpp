#include "launcher/job/node_drain.h"

#include <poll.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include <fmt/format.h>

#include "launcher/cluster/environment.h"
#include "launcher/error.h"
#include "launcher/local/posix_spawner.h"

namespace muster {

SlurmNodeState parse_scontrol_node(const std::string& line) {
  // "NodeName=node1 Arch=x86_64 ... State=IDLE+DRAIN ThreadsPerCore=1 ... Reason=muster: GPU1
  // ... [root@2026-11-25T19:00:00]": every field a word, except Reason, which runs to the end.
  SlurmNodeState out;
  const size_t state = line.find(" State=") != std::string::npos ? line.find(" State=") + 7
                       : line.rfind("State=", 0) == 0             ? 6
                                                                  : std::string::npos;
  if (state == std::string::npos)
    throw Error(ErrorKind::Runtime, "scontrol named no State for the node: " + line.substr(0, 200));
  out.state = line.substr(state, line.find(' ', state) - state);
  out.drain = out.state.find("DRAIN") != std::string::npos;
  if (const size_t reason = line.find(" Reason="); reason != std::string::npos) {
    out.reason = line.substr(reason + 8);
    while (!out.reason.empty() && (out.reason.back() == '\n' || out.reason.back() == ' ')) out.reason.pop_back();
    // Slurm appends who set the reason and when.
    if (const size_t by = out.reason.rfind(" ["); by != std::string::npos && out.reason.back() == ']')
      out.reason.resize(by);
  }
  return out;
}

namespace {

struct CommandOutput {
  ExitStatus status;
  std::string out, err;
};

// Runs `argv` (from the PATH) to its end, at most `deadline`: then its process group is
// killed and the call is an error naming the command.
CommandOutput run_within(const std::vector<std::string>& argv, std::chrono::milliseconds deadline) {
  PosixSpawner spawner;
  ProcessSpec spec;
  spec.argv = argv;
  spec.env = Environment::current();
  SpawnedProcess p = spawner.spawn(spec);
  CommandOutput result;
  const auto until = std::chrono::steady_clock::now() + deadline;
  bool ended = false;
  int open_fds = 2;
  int fds[2] = {p.stdout_fd, p.stderr_fd};
  std::string* sinks[2] = {&result.out, &result.err};
  while (!ended || open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      spawner.signal_group(p.pid, SIGKILL);
      for (int fd : fds)
        if (fd >= 0) close(fd);
      throw Error(ErrorKind::Runtime, fmt::format("{} did not answer within {:g} s", argv.front(),
                                                  deadline.count() / 1e3));
    }
    pollfd polled[2];
    for (int i = 0; i < 2; ++i) polled[i] = {fds[i], POLLIN, 0};
    poll(polled, 2, int(std::min<long long>(left.count(), 50)));
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0) continue;
      char buffer[4096];
      const ssize_t n = read(fds[i], buffer, sizeof buffer);
      if (n > 0 && sinks[i]->size() < (1 << 20)) sinks[i]->append(buffer, size_t(n));
      if (n == 0) {
        close(fds[i]);
        fds[i] = -1;
        --open_fds;
      }
    }
    for (const auto& exit : spawner.reap())
      if (exit.pid == p.pid) {
        result.status = exit.status;
        ended = true;
      }
  }
  return result;
}

class Scontrol : public SlurmNodeControl {
 public:
  explicit Scontrol(std::chrono::milliseconds deadline) : deadline_(deadline) {}

  SlurmNodeState state_of(const std::string& node) override {
    return parse_scontrol_node(checked({"scontrol", "show", "node", node, "-o"}, node).out);
  }
  void drain(const std::string& node, const std::string& reason) override {
    checked({"scontrol", "update", "NodeName=" + node, "State=DRAIN", "Reason=" + reason}, node);
  }
  void resume(const std::string& node) override {
    checked({"scontrol", "update", "NodeName=" + node, "State=RESUME"}, node);
  }

 private:
  CommandOutput checked(const std::vector<std::string>& argv, const std::string& node) {
    CommandOutput r;
    try {
      r = run_within(argv, deadline_);
    } catch (const Error& e) {
      throw Error(ErrorKind::Runtime, fmt::format("{}: {}", node, e.what()));
    }
    if (!r.status.success()) {
      std::string said = r.err.empty() ? r.out : r.err;
      while (!said.empty() && said.back() == '\n') said.pop_back();
      throw Error(ErrorKind::Runtime, fmt::format("{}: scontrol {} {}: {}", node, argv[1], r.status.describe(),
                                                  said.substr(0, 300)));
    }
    return r;
  }

  std::chrono::milliseconds deadline_;
};

bool is_musters(const std::string& reason) { return reason.rfind(kDrainReasonPrefix, 0) == 0; }

}  // namespace

std::unique_ptr<SlurmNodeControl> scontrol_node_control(std::chrono::milliseconds deadline) {
  if (!find_program("scontrol", Environment::current()))
    throw Error(ErrorKind::Usage, "--drain needs Slurm's scontrol on the PATH; run it where slurmd runs "
                                  "(as HealthCheckProgram, a prolog or an epilog)");
  return std::make_unique<Scontrol>(deadline);
}

std::string this_slurm_node() {
  if (const char* name = std::getenv("SLURMD_NODENAME"); name && *name) return name;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string name = host;
  return name.substr(0, name.find('.'));
}

DrainOutcome drain_or_resume(SlurmNodeControl& control, const std::string& node,
                             const std::optional<std::string>& failure) {
  const SlurmNodeState now = control.state_of(node);
  if (now.drain && !is_musters(now.reason))
    return {DrainOutcome::Action::LeftAlone,
            fmt::format("{} stays drained as someone else left it: {}", node,
                        now.reason.empty() ? now.state : now.reason)};
  if (failure) {
    // Slurm keeps a reason of any length; sinfo -R shows its start: the first finding fits.
    std::string reason = kDrainReasonPrefix + *failure;
    if (reason.size() > 250) reason = reason.substr(0, 247) + "...";
    if (now.drain && now.reason == reason) return {DrainOutcome::Action::None, node + " stays drained: " + reason};
    control.drain(node, reason);
    return {DrainOutcome::Action::Drained, fmt::format("drained {}: {}", node, reason)};
  }
  if (!now.drain) return {DrainOutcome::Action::None, ""};
  control.resume(node);
  return {DrainOutcome::Action::Resumed, fmt::format("resumed {}, healthy again (drained for: {})", node, now.reason)};
}

}  // namespace muster
