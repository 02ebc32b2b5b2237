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

namespace muster {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kEcho = 'e';
constexpr char kBulk = 'b';

// One probe connection: echo until EOF, or count a bulk stream and report the count.
void serve_connection(int fd) {
  int yes = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  timeval limit{30, 0};  // a half-open probe must not hold the thread forever
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  char mode = 0;
  if (read_exact(fd, &mode, 1)) {
    if (mode == kEcho) {
      char byte;
      while (read_exact(fd, &byte, 1) && write_exact(fd, &byte, 1)) {}
    } else if (mode == kBulk) {
      std::vector<char> buffer(1 << 16);
      std::uint64_t total = 0;
      auto start = Clock::now();
      ssize_t n;
      while ((n = read(fd, buffer.data(), buffer.size())) > 0) total += std::uint64_t(n);
      double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      double gbps = seconds > 0 ? double(total) * 8 / seconds / 1e9 : 0;
      write_exact(fd, &gbps, sizeof gbps);
    }
  }
  close(fd);
}

}  // namespace

// The schedule puts a node in one measurement at a time; a thread per connection keeps a
// stuck peer from blocking the next one.
ProbeServer::ProbeServer() : listener_(0, "probes") { listener_.serve(serve_connection); }

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

ProbeResult probe_peer(const std::string& address, int port, int round_trips,
                       std::chrono::milliseconds timeout,
                       std::optional<std::chrono::milliseconds> bulk) {
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
      return false;
    }
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    if (rc != 0 && errno != EINPROGRESS) {
      error = std::strerror(errno);
      return false;
    }
    pollfd p{fd, POLLOUT, 0};
    if (rc != 0 && poll(&p, 1, int(timeout.count())) <= 0) {
      error = fmt::format("no answer within {} ms", timeout.count());
      return false;
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      error = std::strerror(err);
      return false;
    }
    fcntl(fd, F_SETFL, 0);  // blocking from here, with a receive limit
    int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    timeval limit{long(timeout.count() / 1000), long(timeout.count() % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    ok = true;
    return true;
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

}  // namespace muster
