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

// run_within, for a command that must succeed: throws Error(Runtime) starting "SUBJECT: "
// when it did not end in time, or ended otherwise than with status 0 ("node1: scontrol
// update exited with status 1: <the first 300 bytes it said>").
CommandOutput run_checked_within(const std::vector<std::string>& argv, std::chrono::milliseconds deadline,
                                 const std::string& subject);

}  // namespace muster
