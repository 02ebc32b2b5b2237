// Measuring the network between nodes: an echo server each agent runs, and the probes
// that other nodes point at it.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "probes/socket_io.h"

namespace muster {

// Answers probes on an ephemeral TCP port on every address: echoes bytes back for RTT
// probes, swallows a bulk stream for bandwidth probes. Runs until destroyed.
class ProbeServer {
 public:
  ProbeServer();
  int port() const { return listener_.port(); }

 private:
  TcpListener listener_;
};

// min / median / p99 of round-trip samples, in microseconds.
struct RttStats {
  double min_us = 0, median_us = 0, p99_us = 0;
  int samples = 0;
};

RttStats summarize_rtt(std::vector<double> samples_us);

// What one probe of one address found.
struct ProbeResult {
  bool reachable = false;
  std::string error;                 // why not, when not reachable
  RttStats rtt;
  std::optional<double> gbps;        // bulk TCP throughput, when asked for
};

// Connects to address:port (bounded by `timeout`), then times `round_trips` one-byte
// round trips with TCP_NODELAY; with `bulk` set, also streams data for that long and
// reports Gbit/s as the receiver counted it.
ProbeResult probe_peer(const std::string& address, int port, int round_trips,
                       std::chrono::milliseconds timeout,
                       std::optional<std::chrono::milliseconds> bulk);

}  // namespace muster
