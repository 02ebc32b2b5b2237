// Measuring the network between nodes: an echo server each agent runs, and the probes
// that other nodes point at it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "probes/job_server.h"

namespace muster {

// The probe protocol, on its own so that it can be tested and fuzzed without sockets: the
// first byte picks the mode; 'e' echoes every byte back (RTT probes), 'b' swallows a bulk
// stream until the client shuts its side and answers the Gbit/s it counted (a double).
class ProbeProtocol : public JobServer::Protocol {
 public:
  bool serve(long id, std::string& in, Replies& replies) override;
  void end_of_input(long id, Replies& replies) override;
  void closed(long id) override { streams_.erase(id); }

 private:
  struct Stream {
    char mode = 0;
    std::uint64_t bytes = 0;
    JobServer::Clock::time_point first{};
  };
  std::map<long, Stream> streams_;
};

// Answers probes on an ephemeral TCP port on every address (it must: every address of the
// node is measured), from clients that hold `secret`. Runs until destroyed.
class ProbeServer {
 public:
  explicit ProbeServer(const std::string& secret);
  int port() const { return server_.port(); }

 private:
  ProbeProtocol protocol_;
  JobServer server_;
};

// The purpose string of the probe server's handshake.
inline constexpr const char* kProbePurpose = "muster probe v1";

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
  // When not reachable: why the prober's machine could not measure ("" when it could): the
  // failure may be the machine's, not the network's (probes/starvation.h).
  std::string starved;
  // Packets the prober's kernel dropped from its backlogs while it probed (softnet_stat).
  std::uint64_t dropped = 0;
  // The prober's CPU pressure (the last 10 s, a fraction) when it answered; set by the head
  // from the agent's answer, to weigh a target's own starvation against.
  std::optional<double> cpu_pressure;
  // The prober's /proc/pressure/cpu "some" total (us) when it answered: two of a node's
  // answers give its CPU shortage between them, to weigh a failed probe of it against.
  std::optional<std::uint64_t> cpu_stalled_us;
};

// Connects to address:port and proves `secret` (bounded by `timeout`), then times
// `round_trips` one-byte round trips with TCP_NODELAY; with `bulk` set, also streams data
// for that long and reports Gbit/s as the receiver counted it.
ProbeResult probe_peer(const std::string& address, int port, const std::string& secret,
                       int round_trips, std::chrono::milliseconds timeout,
                       std::optional<std::chrono::milliseconds> bulk);

}  // namespace muster
