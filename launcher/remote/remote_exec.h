// Running one command once on every node, like pdsh: the command's words arrive verbatim.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/local/local_job.h"
#include "launcher/remote/ssh_transport.h"

namespace muster {

// The most output kept per node for --fold (beyond it, the rest is dropped and said so).
inline constexpr size_t kMaxKeptOutput = size_t(16) << 20;

// How the command went on one node.
struct NodeExecResult {
  std::string host;
  int status = -1;                      // the remote exit status; -1 when unreachable
  std::string out, err;                 // what it printed, kept only without a sink (--fold)
  bool cut = false;                     // the kept output reached kMaxKeptOutput and stops there
  std::optional<std::string> failure;   // why the node could not run it

  // Keeps one whole line of the command's output while out and err together stay within
  // kMaxKeptOutput; from the first line that would not fit, nothing more (and `cut`).
  void keep_line(OutputStream stream, std::string_view line) {
    if (cut || out.size() + err.size() + line.size() + 1 > kMaxKeptOutput) {
      cut = true;
      return;
    }
    (stream == OutputStream::Stdout ? out : err).append(line).push_back('\n');
  }
};

// Receives output lines as they arrive, from several threads (it must lock).
using ExecLineSink = std::function<void(const std::string& host, OutputStream, std::string_view)>;

// Runs `argv` on every node, at most `fanout` at a time. With a `sink`, lines are streamed
// to it and nothing is kept; without one, each node's output is kept (up to kMaxKeptOutput).
std::vector<NodeExecResult> exec_on_nodes(SshTransport& transport, const ClusterSpec& cluster,
                                          const std::vector<std::string>& argv, int fanout,
                                          const ExecLineSink& sink);

// The exit status of a whole exec (pdsh -S): the largest remote status, an unreachable
// node counting as ssh's 255.
int exec_exit_status(const std::vector<NodeExecResult>& results);

}  // namespace muster
