// `muster exec` on this machine: with no cluster named (or one that names only this
// machine), the command runs here as a child of muster, with no SSH, as `run` does.
#pragma once

#include <string>
#include <vector>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/remote/remote_exec.h"

namespace muster {

// Runs `argv` once per node of `cluster`, every one of them this machine, all at once and
// in muster's environment and directory. With a `sink` lines are streamed to it (from this
// thread); without, each node's output is kept as exec_on_nodes keeps it. A failure stops
// no other. Throws Error(CommandNotFound / CommandNotExecutable) before anything starts when
// `argv` cannot run, and Interrupted once the commands were stopped after SIGINT, SIGTERM
// or SIGHUP.
std::vector<NodeExecResult> exec_here(const ClusterSpec& cluster, const std::vector<std::string>& argv,
                                      const ExecLineSink& sink);

}  // namespace muster
