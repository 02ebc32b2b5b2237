// Whole reads and writes on a socket, retrying short transfers and EINTR: unbounded on a
// blocking socket, or bounded by a deadline on any socket.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>

namespace muster {

// Reads exactly `size` bytes; false on end of file, error or a receive timeout.
inline bool read_exact(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= size_t(n);
  }
  return true;
}

// Writes exactly `size` bytes; false when the peer is gone (never raises SIGPIPE).
inline bool write_exact(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= size_t(n);
  }
  return true;
}

using SocketClock = std::chrono::steady_clock;

// Waits until `fd` is ready for `events` or `deadline` passes; false on timeout or error.
inline bool wait_ready(int fd, short events, SocketClock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SocketClock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    int ready = poll(&p, 1, int(left.count()));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return false;
  }
}

// Reads exactly `size` bytes before `deadline`; false on end of file, error or timeout.
inline bool read_before(int fd, char* data, size_t size, SocketClock::time_point deadline) {
  while (size > 0) {
    ssize_t n = recv(fd, data, size, MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= size_t(n);
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR)) return false;
    if (!wait_ready(fd, POLLIN, deadline)) return false;
  }
  return true;
}

// Writes exactly `size` bytes before `deadline`; false when the peer is gone or too slow.
inline bool write_before(int fd, const char* data, size_t size, SocketClock::time_point deadline) {
  while (size > 0) {
    ssize_t n = send(fd, data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      data += n;
      size -= size_t(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
    if (!wait_ready(fd, POLLOUT, deadline)) return false;
  }
  return true;
}

}  // namespace muster
