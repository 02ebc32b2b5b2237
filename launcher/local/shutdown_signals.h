// SIGINT, SIGTERM and SIGHUP delivered to muster, as bytes on a file descriptor that an
// event loop can poll.
#pragma once

namespace muster {

// While alive, muster's SIGINT/SIGTERM/SIGHUP write their number to fd() instead of
// killing muster, so the launcher can tear the job down first. One instance at a time.
class ShutdownSignals {
 public:
  ShutdownSignals();
  ~ShutdownSignals();
  ShutdownSignals(const ShutdownSignals&) = delete;
  ShutdownSignals& operator=(const ShutdownSignals&) = delete;

  // Readable when a signal has arrived; each byte is one signal number.
  int fd() const { return read_fd_; }

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
};

}  // namespace muster
