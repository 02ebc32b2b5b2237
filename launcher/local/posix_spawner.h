// The real ProcessSpawner: posix_spawn, kill and /proc on Linux.
#pragma once

#include <mutex>
#include <set>

#include "launcher/local/process_spawner.h"

namespace muster {

// Fields of /proc/PID/stat after the command name: state, parent and process group.
struct ProcStat {
  char state = '?';  // 'Z' or 'X': ended, not yet (or just) reaped
  pid_t ppid = -1;
  pid_t pgrp = -1;
};
// nullopt when there is no such process (or /proc cannot say).
std::optional<ProcStat> read_proc_stat(pid_t pid);

// The executable `name` resolves to through the PATH of `env`, if any.
std::optional<std::string> find_program(const std::string& name, const Environment& env);

// Checks that `name` can be executed as a command in `env`, as a shell would before running
// it: throws Error(CommandNotFound) when there is no such file or none in the PATH, and
// Error(CommandNotExecutable) when the file is there but cannot be executed (a directory, a
// file without the execute bit), each message naming the file and the fix.
void check_command_runs(const std::string& name, const Environment& env);

// Starts a helper program (srun) with posix_spawn, which is safe in a process with threads
// where fork is not: from the PATH of `env`, stdin from /dev/null, stdout and stderr onto
// `out_fd` and `err_fd`, no signal blocked. With `own_session` it is cut off from the
// terminal (Ctrl-C is muster's to handle); without, it stays in muster's process group, so
// that Ctrl-C reaches it as it reaches an srun typed by hand. The caller waits for it.
// Throws Error(Runtime) naming the program when it cannot start.
pid_t spawn_helper(const std::vector<std::string>& argv, const Environment& env, int out_fd,
                   int err_fd, bool own_session);

// Spawns real processes. While it exists muster is a child subreaper, so a rank's
// orphaned grandchildren become muster's children and can be waited for and reaped.
class PosixSpawner : public ProcessSpawner {
 public:
  PosixSpawner();
  ~PosixSpawner() override;

  SpawnedProcess spawn(const ProcessSpec& spec) override;
  void signal_group(pid_t pgid, int signal) override;
  void signal_process(pid_t pid, int signal) override;
  std::vector<ProcessExit> reap() override;
  std::vector<pid_t> live_group_members(pid_t pgid) override;
  std::vector<pid_t> escaped_job_processes(const std::vector<std::string>& markers,
                                           const std::vector<pid_t>& except_groups) override;
  std::string describe_process(pid_t pid) override;
  int child_event_fd() const override { return child_read_fd_; }

  // While the returned lock is held, reap() waits: another thread of this process is
  // tracing a child (reading its stacks), and waitpid(-1) would take that child's ptrace
  // stops for its own.
  std::unique_lock<std::mutex> hold_reaping() { return std::unique_lock(reaping_); }

 private:
  std::mutex reaping_;
  std::set<pid_t> leaders_;
  int child_read_fd_ = -1;
};

}  // namespace muster
