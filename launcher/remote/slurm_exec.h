// `muster exec` inside an allocation, through srun instead of SSH (which many sites refuse on
// compute nodes): one srun step of one task per node, its lines tagged with their node as over
// SSH, and srun's own words about a failed task passed on as srun prints them.
#pragma once

#include <vector>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/remote/remote_exec.h"

namespace muster {

struct SrunExec {
  std::vector<NodeExecResult> nodes;  // one per node of the cluster, in its order
  int exit_status = 0;                // srun's, as a shell reports it: the largest task's
  std::string srun_said;              // srun's own lines, kept without a sink
};

// Runs `argv` once on every node of `cluster` (all in the allocation of `env`) as one srun
// step, streaming lines to `sink` (or keeping them per node without one, for --fold). srun's
// own lines go to the sink with an empty host, on stderr. A
// SIGINT, SIGTERM or SIGHUP to muster cancels the step. Throws Error(Config) naming a node the
// allocation does not hold, Error(Runtime) when srun cannot start.
SrunExec exec_through_srun(const ClusterSpec& cluster, const std::vector<std::string>& argv,
                           const Environment& env, const ExecLineSink& sink);

// srun --label's tag ("3: ", " 3: ") split from a line: the task number and the rest; no task
// when the line has no tag (srun's own words). Exported for tests.
std::pair<std::optional<size_t>, std::string_view> split_srun_label(std::string_view line);

}  // namespace muster
