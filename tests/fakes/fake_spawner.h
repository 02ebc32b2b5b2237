// A ProcessSpawner that runs nothing: each "process" follows a script, and every spawn and
// signal is recorded so tests can check what the launcher did.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "launcher/error.h"
#include "launcher/local/process_spawner.h"

namespace muster::testing {

// How a fake process behaves, chosen by its argv[0].
struct FakeProgram {
  std::string stdout_text;               // written before it "runs"
  std::optional<int> exits_with;         // ends by itself with this code
  bool ignores_sigterm = false;
  bool survives_sigkill = false;         // stuck in the kernel, say
  bool cannot_start = false;
  std::optional<int> killed_by;          // ends by itself, killed by this signal
};

class FakeSpawner : public ProcessSpawner {
 public:
  std::map<std::string, FakeProgram> programs;
  std::vector<std::string> log;          // "spawn NAME pid", "SIGTERM pid", "SIGKILL pid"
  std::vector<ProcessSpec> spawned;

  SpawnedProcess spawn(const ProcessSpec& spec) override {
    const FakeProgram& program = programs.at(spec.argv.at(0));
    if (program.cannot_start)
      throw Error(ErrorKind::Runtime, fmt::format("cannot execute '{}': No such file or directory",
                                                  spec.argv[0]));
    pid_t pid = next_pid_++;
    spawned.push_back(spec);
    log.push_back(fmt::format("spawn {} {}", spec.argv[0], pid));
    int out[2], err[2];
    if (pipe2(out, O_NONBLOCK) != 0 || pipe2(err, O_NONBLOCK) != 0) throw Error(ErrorKind::Runtime, "pipe");
    [[maybe_unused]] auto n = write(out[1], program.stdout_text.data(), program.stdout_text.size());
    close(out[1]);
    close(err[1]);
    alive_[pid] = &program;
    if (program.exits_with) pending_.push_back({pid, ExitStatus::exited(*program.exits_with)});
    if (program.killed_by) pending_.push_back({pid, ExitStatus::signaled(*program.killed_by)});
    return {pid, out[0], err[0]};
  }

  void signal_group(pid_t pgid, int signal) override {
    log.push_back(fmt::format("{} {}", signal == SIGKILL ? "SIGKILL" : "SIGTERM", pgid));
    auto it = alive_.find(pgid);
    if (it == alive_.end()) return;
    bool dies = signal == SIGKILL ? !it->second->survives_sigkill : !it->second->ignores_sigterm;
    if (dies) pending_.push_back({pgid, ExitStatus::signaled(signal)});
  }
  void signal_process(pid_t pid, int signal) override { signal_group(pid, signal); }

  std::vector<ProcessExit> reap() override {
    std::vector<ProcessExit> out;
    for (const auto& e : pending_)
      if (alive_.erase(e.pid)) out.push_back(e);
    pending_.clear();
    return out;
  }

  std::vector<pid_t> live_group_members(pid_t pgid) override {
    if (alive_.count(pgid)) return {pgid};
    return {};
  }
  std::vector<pid_t> escaped_job_processes(const std::vector<std::string>&,
                                           const std::vector<pid_t>&) override {
    return {};
  }
  std::string describe_process(pid_t pid) override { return fmt::format("pid {} (fake)", pid); }

 private:
  pid_t next_pid_ = 100;
  std::map<pid_t, const FakeProgram*> alive_;
  std::vector<ProcessExit> pending_;
};

}  // namespace muster::testing
