// A short outside command run to its end with a deadline: scontrol asked about a node or a
// job. What a health check or a head asking Slurm one question needs, and none of a rank's
// supervision.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "launcher/local/exit_status.h"

namespace muster {

struct CommandOutput {
  ExitStatus status;
  std::string out, err;  // each at most 1 MiB: the rest is dropped
};

// Runs `argv` (from the PATH, in muster's environment) to its end, at most `deadline`: then
// its process group is killed and the call throws Error(Runtime) naming the command.
CommandOutput run_within(const std::vector<std::string>& argv, std::chrono::milliseconds deadline);

}  // namespace muster
