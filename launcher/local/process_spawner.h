// Starting and signalling processes: the one place the launcher touches fork/exec/kill,
// behind an interface so that tests can use a recording fake.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "launcher/cluster/environment.h"
#include "launcher/local/exit_status.h"

namespace muster {

// What to start.
struct ProcessSpec {
  std::vector<std::string> argv;        // argv[0] is looked up in the PATH of `env`...
  std::optional<std::string> program;   // ...unless this names the file to execute
  Environment env;                      // the complete environment (nothing is inherited)
  std::optional<std::string> workdir;   // chdir here before exec
  std::vector<int> cpus;                // bind to these CPUs before exec; empty: no binding
  // A descriptor of ours the child gets as `inherited_fd_in_child` (a service's socket, as
  // PMI_FD); -1: none. It must not be that number already, so that the move clears its
  // close-on-exec.
  int inherited_fd = -1;
  int inherited_fd_in_child = -1;
};

// A started process: the leader of its own session and process group (pgid == pid).
struct SpawnedProcess {
  pid_t pid = -1;
  int stdout_fd = -1;  // read ends, non-blocking, close-on-exec
  int stderr_fd = -1;
};

// A reaped process.
struct ProcessExit {
  pid_t pid = -1;
  ExitStatus status;
};

// Starts process groups, signals them, reaps them.
class ProcessSpawner {
 public:
  virtual ~ProcessSpawner() = default;

  // Starts `spec` in a new session. Throws Error(Runtime) when it cannot be executed.
  virtual SpawnedProcess spawn(const ProcessSpec& spec) = 0;
  // Sends `signal` to every process in group `pgid`.
  virtual void signal_group(pid_t pgid, int signal) = 0;
  // Sends `signal` to one process.
  virtual void signal_process(pid_t pid, int signal) = 0;
  // Reaps every child that has ended without waiting; returns the spawned leaders among them.
  virtual std::vector<ProcessExit> reap() = 0;
  // The processes of group `pgid` that are still alive (zombies excluded).
  virtual std::vector<pid_t> live_group_members(pid_t pgid) = 0;
  // Live processes outside `except_groups` whose environment holds every one of `markers`
  // ("MUSTER_JOB_ID=..."): ones that left their rank's process group (setsid, daemons).
  virtual std::vector<pid_t> escaped_job_processes(const std::vector<std::string>& markers,
                                                   const std::vector<pid_t>& except_groups) = 0;
  // The command line of `pid`, for naming a process that will not die.
  virtual std::string describe_process(pid_t pid) = 0;
  // Readable when a child may have ended; -1 when the caller should just poll periodically.
  virtual int child_event_fd() const { return -1; }
};

}  // namespace muster
