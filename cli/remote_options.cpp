#include "cli/remote_options.h"

#include <cmath>

#include <CLI/CLI.hpp>

#include "cli/flag_checks.h"

namespace muster::cli {

RemoteSettings RemoteFlags::settings() const {
  RemoteSettings s;
  s.fanout = fanout;
  s.fanout_given = fanout_given;
  s.shipping = no_ship ? Shipping::Forbidden : Shipping::Allowed;
  s.heartbeat_timeout = std::chrono::milliseconds(std::llround(heartbeat_timeout_s * 1000));
  return s;
}

void add_remote_flags(CLI::App& app, RemoteFlags& flags, RemoteUse use) {
  app.add_option("--fanout", flags.fanout,
                 "at most this many SSH handshakes at once (below sshd's MaxStartups of 10)")
      ->check(in_range(1, 1024, true))
      ->each([&flags](const std::string&) { flags.fanout_given = true; })
      ->capture_default_str();
  if (use == RemoteUse::Command) return;
  app.add_flag("--no-ship", flags.no_ship,
               "never copy muster to a node that lacks it; report the node instead");
  app.add_option("--heartbeat-timeout", flags.heartbeat_timeout_s,
                 "seconds of silence after which a node (or, on the node, the head) is taken for "
                 "lost and the job is stopped")
      ->check(in_range(1, kLongestWaitSeconds))
      ->capture_default_str();
}

}  // namespace muster::cli
