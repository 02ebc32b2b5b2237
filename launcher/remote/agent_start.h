// Starting `muster agent` on a node, in one round trip when the node already has this
// build: the start command looks for the bundle of this build id and execs it. When the
// bundle is missing (or fails to start) and shipping is allowed, it is shipped through the
// command's stdin (a tar.gz that the node's shell unpacks; no SFTP, sha256sum or Python
// needed), verified once by running it, and made visible with an atomic symlink. With
// shipping forbidden, a bundle installed on the node or the node's own muster is used. A
// start that fails is told in the node's own words, with what to do about it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "launcher/remote/agent_protocol.h"
#include "launcher/remote/launch_spec.h"
#include "launcher/remote/ssh_transport.h"

namespace muster {

enum class Shipping { Allowed, Forbidden };

// The bundle archive, made at most once per head process and only when a node needs it,
// then shared by every node's thread.
class BundleArchive {
 public:
  // Throws Error(Runtime) when the bundle cannot be made (every caller sees the same error).
  const std::string& get();

 private:
  std::once_flag once_;
  std::string archive_;
  std::string error_;
};

// An agent that has said hello.
struct StartedAgent {
  std::unique_ptr<RemoteCommand> command;
  NodeHello hello;
  FrameReader reader{kMaxAgentFramePayload};  // what came after the hello
  std::string stderr_text;  // what the node printed on stderr so far
  double command_rtt_ms = 0;  // until the start command's first line: a remote command's round trip
  bool shipped = false;     // the bundle was shipped to the node on the way
};

// Starts the agent (`agent_args` after "muster") on `connection`'s node and reads its hello
// within `hello_limit`. Throws SshError naming `host`, with the node's own words, when it
// cannot be started. `cancelled`, when it becomes true, calls the attempt off.
StartedAgent start_agent(SshConnection& connection, const std::string& host, Shipping shipping,
                         BundleArchive& bundle, const std::string& agent_args,
                         std::chrono::milliseconds hello_limit, const std::atomic<bool>& cancelled);

// The shell command that starts the agent: exported for the tests of its quoting.
std::string agent_start_command(Shipping shipping, const std::string& agent_args);

// The shell command that unpacks a shipped bundle from its stdin, checks it and publishes it
// in ~/.cache/muster (`replace`: over a bundle already there): exported for its tests.
std::string ship_command(bool replace);

}  // namespace muster
