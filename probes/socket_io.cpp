#include "probes/socket_io.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>

#include <cstring>

#include <fmt/format.h>

#include "launcher/error.h"

namespace muster {

TcpListener::TcpListener(int port, const char* what) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int yes = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(uint16_t(port));
  socklen_t len = sizeof addr;
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listen_fd_, 1024) != 0 ||
      getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      pipe2(wake_, O_CLOEXEC) != 0) {
    int saved = errno;
    for (int fd : {listen_fd_, wake_[0], wake_[1]})
      if (fd >= 0) close(fd);
    throw Error(ErrorKind::Runtime, fmt::format("cannot listen for {} on port {}: {}", what, port,
                                                std::strerror(saved)));
  }
  port_ = ntohs(addr.sin_port);
}

TcpListener::~TcpListener() {
  [[maybe_unused]] auto n = write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(wake_[0]);
  close(wake_[1]);
}

void TcpListener::serve(std::function<void(int fd)> on_connection) {
  thread_ = std::thread([this, on_connection = std::move(on_connection)] {
    for (;;) {
      pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
      if (fds[1].revents) return;
      if (!(fds[0].revents & POLLIN)) continue;
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) std::thread(on_connection, fd).detach();
    }
  });
}

}  // namespace muster
