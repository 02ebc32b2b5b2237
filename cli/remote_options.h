// --fanout, --no-ship and --heartbeat-timeout, shared by the subcommands that reach other
// machines.
#pragma once

#include "launcher/job/cluster_context.h"

namespace CLI {
class App;
}

namespace muster::cli {

struct RemoteFlags {
  int fanout = kDefaultFanout;
  bool fanout_given = false;
  bool no_ship = false;
  double heartbeat_timeout_s = std::chrono::duration<double>(kDefaultHeartbeatTimeout).count();
  RemoteSettings settings() const;
};

// What a command does on other machines, for the flags it takes.
enum class RemoteUse {
  Command,  // exec: one command per node, nothing shipped
  Agents,   // run, smoke, ping, doctor: an agent per node, shipped when missing
};

// Declares --fanout, and for agents --no-ship and --heartbeat-timeout, on `app`.
void add_remote_flags(CLI::App& app, RemoteFlags& flags, RemoteUse use);

}  // namespace muster::cli
