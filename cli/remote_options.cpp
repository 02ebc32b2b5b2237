#include "cli/remote_options.h"

#include <CLI/CLI.hpp>

namespace muster::cli {

void add_remote_flags(CLI::App& app, RemoteFlags& flags, bool shipping) {
  app.add_option("--fanout", flags.fanout,
                 "at most this many SSH handshakes at once (below sshd's MaxStartups of 10)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  if (shipping)
    app.add_flag("--no-ship", flags.no_ship,
                 "never copy muster to a node that lacks it; report the node instead");
}

}  // namespace muster::cli
