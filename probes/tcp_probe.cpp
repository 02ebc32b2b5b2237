#include "probes/tcp_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "launcher/error.h"
#include "probes/socket_io.h"
#include "probes/starvation.h"

namespace muster {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kEcho = 'e';
constexpr char kBulk = 'b';

}  // namespace

bool ProbeProtocol::serve(long id, std::string& in, Replies& replies) {
  Stream& stream = streams_[id];
  if (stream.mode == 0) {
    stream.mode = in[0];
    in.erase(0, 1);
    if (stream.mode != kEcho && stream.mode != kBulk) return false;
  }
  if (stream.mode == kEcho) {
    if (!in.empty()) replies.emplace_back(id, std::move(in));
  } else {
    if (stream.bytes == 0) stream.first = JobServer::Clock::now();
    stream.bytes += in.size();
  }
  in.clear();
  return true;
}

void ProbeProtocol::end_of_input(long id, Replies& replies) {
  auto it = streams_.find(id);
  if (it == streams_.end() || it->second.mode != kBulk) return;
  const double seconds = std::chrono::duration<double>(JobServer::Clock::now() - it->second.first).count();
  const double gbps = seconds > 0 ? double(it->second.bytes) * 8 / seconds / 1e9 : 0;
  replies.emplace_back(id, std::string(reinterpret_cast<const char*>(&gbps), sizeof gbps));
}

// The schedule puts a node in one measurement at a time: a few connections at once are
// plenty, and bulk streams need room in the buffer.
ProbeServer::ProbeServer(const std::string& secret)
    : server_("", 0, secret, kProbePurpose, protocol_,
              JobServer::Limits{64, 32, std::chrono::seconds(3), std::chrono::seconds(30), size_t(1) << 20},
              "probes") {}

RttStats summarize_rtt(std::vector<double> samples_us) {
  RttStats s;
  s.samples = int(samples_us.size());
  if (samples_us.empty()) return s;
  std::sort(samples_us.begin(), samples_us.end());
  s.min_us = samples_us.front();
  s.median_us = samples_us[(samples_us.size() - 1) / 2];
  // Nearest-rank p99.
  size_t rank = size_t(std::ceil(0.99 * double(samples_us.size())));
  s.p99_us = samples_us[std::min(samples_us.size(), std::max<size_t>(rank, 1)) - 1];
  return s;
}

namespace {

// `answered` is set when the failure was an answer (a refusal, "no route to host", a wrong
// address): only a wait that ran out can be the prober's machine's fault.
ProbeResult probe_once(const std::string& address, int port, const std::string& secret,
                       int round_trips, std::chrono::milliseconds timeout,
                       std::optional<std::chrono::milliseconds> bulk, bool& answered) {
  ProbeResult result;
  // Connects `fd`; on failure closes it, sets `error` and returns false.
  auto connect_to = [&](int& fd, std::string& error) -> bool {
    bool ok = false;
    struct CloseUnlessOk {
      int& fd;
      bool& ok;
      ~CloseUnlessOk() {
        if (!ok && fd >= 0) close(fd), fd = -1;
      }
    } guard{fd, ok};
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    if (inet_pton(AF_INET, address.c_str(), &addr.sin_addr) != 1) {
      error = "not an IPv4 address";
      answered = true;
      return false;
    }
    const TcpConnection connection =
        connect_before(reinterpret_cast<sockaddr*>(&addr), sizeof addr, SocketClock::now() + timeout);
    fd = connection.fd;
    if (connection.error == ETIMEDOUT) {
      error = fmt::format("no answer within {} ms", timeout.count());
      return false;
    }
    if (connection.error != 0) {
      error = std::strerror(connection.error);
      answered = true;
      return false;
    }
    fcntl(fd, F_SETFL, 0);  // blocking from here, with a receive limit
    int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    timeval limit{long(timeout.count() / 1000), long(timeout.count() % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    error = prove_secret(fd, secret, kProbePurpose, timeout);
    ok = error.empty();
    return ok;
  };

  int fd = -1;
  if (!connect_to(fd, result.error)) return result;
  std::vector<double> samples;
  bool ok = write_exact(fd, &kEcho, 1);
  for (int i = 0; ok && i < round_trips; ++i) {
    char byte = char(i), back = 0;
    auto start = Clock::now();
    ok = write_exact(fd, &byte, 1) && read_exact(fd, &back, 1) && back == byte;
    if (ok) samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  close(fd);
  if (!ok) {
    result.error = "the probe connection broke";
    return result;
  }
  result.reachable = true;
  result.rtt = summarize_rtt(samples);

  std::string bulk_error;  // a failed bulk stream leaves the RTT result as it was
  if (bulk && connect_to(fd, bulk_error)) {
    std::vector<char> chunk(1 << 16, 'x');
    bool sent = write_exact(fd, &kBulk, 1);
    auto stop_at = Clock::now() + *bulk;
    while (sent && Clock::now() < stop_at) sent = write_exact(fd, chunk.data(), chunk.size());
    shutdown(fd, SHUT_WR);
    double gbps = 0;
    timeval limit{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    if (sent && read_exact(fd, &gbps, sizeof gbps)) result.gbps = gbps;
    close(fd);
  }
  return result;
}

}  // namespace

ProbeResult probe_peer(const std::string& address, int port, const std::string& secret,
                       int round_trips, std::chrono::milliseconds timeout,
                       std::optional<std::chrono::milliseconds> bulk) {
  const CpuShortage before = read_cpu_shortage();
  const NeighbourTable table_before = read_neighbour_table();
  const auto start = Clock::now();
  bool answered = false;
  ProbeResult result = probe_once(address, port, secret, round_trips, timeout, bulk, answered);
  const CpuShortage after = read_cpu_shortage();
  result.dropped = dropped_between(before, after);
  if (result.reachable) return result;
  // A full neighbour table is this node's own limit, as true for the job's ranks as for the
  // probe: a failure with its cause named, never a starved measurement to be excused.
  if (auto full = neighbour_table_between(table_before, read_neighbour_table()); !full.empty()) {
    result.error += "; " + full;
    return result;
  }
  if (answered) return result;  // refused or unroutable: the network's answer, not a wait
  result.starved = starvation_between(before, after,
                                      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start));
  return result;
}

}  // namespace muster
