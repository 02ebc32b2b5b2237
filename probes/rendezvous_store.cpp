#include "probes/rendezvous_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "launcher/error.h"
#include "probes/socket_io.h"

namespace muster {
namespace {

// Wire: 'S' key value -> 'O';  'G' key wait_ms -> 'V' value | 'T'. Strings are a 32-bit
// length and bytes. Each message goes out in one write: split into several, Nagle and
// delayed ACKs would hold every request back for 40 ms.
void append_string(std::string& message, const std::string& s) {
  std::uint32_t n = std::uint32_t(s.size());
  message.append(reinterpret_cast<const char*>(&n), 4);
  message += s;
}
bool send_message(int fd, const std::string& message) {
  return write_exact(fd, message.data(), message.size());
}

bool read_string(int fd, std::string& s) {
  std::uint32_t n = 0;
  if (!read_exact(fd, &n, 4) || n > (64u << 20)) return false;
  s.resize(n);
  return read_exact(fd, s.data(), n);
}

}  // namespace

RendezvousServer::RendezvousServer(int port) : listener_(port, "the rendezvous") {
  listener_.serve([values = values_](int fd) { serve(values, fd); });
}

void RendezvousServer::serve(const std::shared_ptr<Values>& values, int fd) {
  int yes = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  char op = 0;
  std::string key, value;
  while (read_exact(fd, &op, 1) && read_string(fd, key)) {
    if (op == 'S') {
      if (!read_string(fd, value)) break;
      {
        std::lock_guard lock(values->mutex);
        values->by_key[key] = value;
      }
      values->changed.notify_all();
      if (!write_exact(fd, "O", 1)) break;
    } else if (op == 'G') {
      std::uint32_t wait_ms = 0;
      if (!read_exact(fd, &wait_ms, 4)) break;
      std::unique_lock lock(values->mutex);
      bool found = values->changed.wait_for(lock, std::chrono::milliseconds(wait_ms),
                                            [&] { return values->by_key.count(key) > 0; });
      std::string answer = found ? "V" : "T";
      if (found) append_string(answer, values->by_key[key]);
      lock.unlock();
      if (!send_message(fd, answer)) break;
    } else {
      break;
    }
  }
  close(fd);
}

RendezvousClient::RendezvousClient(const std::string& host, int port,
                                   std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  std::string why = "no answer";
  while (std::chrono::steady_clock::now() < deadline) {
    addrinfo hints{}, *found = nullptr;
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) == 0) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
        freeaddrinfo(found);
        int yes = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
        fd_ = fd;
        return;
      }
      why = std::strerror(errno);
      close(fd);
      freeaddrinfo(found);
    } else {
      why = "cannot resolve " + host;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw Error(ErrorKind::Runtime, fmt::format("cannot reach the rendezvous at {}:{} ({}); is "
                                              "MASTER_ADDR reachable from this node?", host, port, why));
}

RendezvousClient::~RendezvousClient() {
  if (fd_ >= 0) close(fd_);
}

void RendezvousClient::set(const std::string& key, const std::string& value) {
  std::string message = "S";
  append_string(message, key);
  append_string(message, value);
  char ok = 0;
  if (!send_message(fd_, message) || !read_exact(fd_, &ok, 1))
    throw Error(ErrorKind::Runtime, "the rendezvous connection broke (rank 0 gone?)");
}

std::string RendezvousClient::get(const std::string& key, std::chrono::milliseconds limit) {
  std::uint32_t wait_ms = std::uint32_t(limit.count());
  std::string message = "G";
  append_string(message, key);
  message.append(reinterpret_cast<const char*>(&wait_ms), 4);
  char answer = 0;
  if (!send_message(fd_, message) || !read_exact(fd_, &answer, 1))
    throw Error(ErrorKind::Runtime, "the rendezvous connection broke (rank 0 gone?)");
  if (answer == 'T')
    throw Error(ErrorKind::Runtime, fmt::format("timed out waiting for '{}' at the rendezvous", key));
  std::string value;
  if (!read_string(fd_, value)) throw Error(ErrorKind::Runtime, "the rendezvous connection broke");
  return value;
}

}  // namespace muster
