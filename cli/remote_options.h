// --fanout and --no-ship, shared by the subcommands that reach other machines.
#pragma once

#include "launcher/remote/remote_job.h"

namespace CLI {
class App;
}

namespace muster::cli {

struct RemoteFlags {
  int fanout = kDefaultFanout;
  bool no_ship = false;
  RemoteOptions options() const {
    return {fanout, no_ship ? Shipping::Forbidden : Shipping::Allowed};
  }
};

// Declares --fanout (and --no-ship when `shipping` is true) on `app`.
void add_remote_flags(CLI::App& app, RemoteFlags& flags, bool shipping);

}  // namespace muster::cli
