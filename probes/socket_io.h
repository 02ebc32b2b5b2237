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

// A TCP connection opened before a deadline, or why not.
struct TcpConnection {
  int fd = -1;    // connected, non-blocking and close-on-exec; -1 when it failed
  int error = 0;  // an errno when it failed: ETIMEDOUT when the deadline came first
};

// Opens a TCP connection to `address` before `deadline`. A blocking connect() waits out the
// kernel's SYN retries, about 127 s against an address that drops them, whatever limit the
// caller had: this one gives up at the deadline. Every connection muster opens goes here.
inline TcpConnection connect_before(const sockaddr* address, socklen_t length,
                                    SocketClock::time_point deadline) {
  const int fd = socket(address->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return {-1, errno};
  int error = ::connect(fd, address, length) == 0 ? 0 : errno;
  if (error == EINPROGRESS || error == EINTR) {
    error = ETIMEDOUT;
    if (wait_ready(fd, POLLOUT, deadline)) {
      socklen_t size = sizeof error;
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
    }
  }
  if (error == 0) return {fd, 0};
  close(fd);
  return {-1, error};
}

}  // namespace muster
