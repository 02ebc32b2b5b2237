#include "launcher/local/shutdown_signals.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

#include "launcher/error.h"

namespace muster {
namespace {
int g_write_fd = -1;  // a signal handler can reach nothing else

void on_signal(int signal) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(signal);
  [[maybe_unused]] auto n = write(g_write_fd, &byte, 1);
  errno = saved;
}

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
}  // namespace

ShutdownSignals::ShutdownSignals() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw Error(ErrorKind::Runtime, "cannot create a pipe for signal handling");
  read_fd_ = fds[0];
  write_fd_ = g_write_fd = fds[1];
  struct sigaction action = {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int s : kSignals) sigaction(s, &action, nullptr);
}

ShutdownSignals::~ShutdownSignals() {
  for (int s : kSignals) signal(s, SIG_DFL);
  g_write_fd = -1;
  close(read_fd_);
  close(write_fd_);
}

}  // namespace muster
