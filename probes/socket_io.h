// Whole reads and writes on a blocking socket, retrying short transfers and EINTR.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <functional>
#include <thread>

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

// Accepts connections on a TCP port of every address on a thread of its own, handing each
// to `serve` on a detached thread, until destroyed.
class TcpListener {
 public:
  // Listens on `port` (0: one the kernel picks). Throws Error(Runtime) naming `what`.
  TcpListener(int port, const char* what);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  int port() const { return port_; }
  // Starts accepting; call once.
  void serve(std::function<void(int fd)> on_connection);

 private:
  int listen_fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace muster
