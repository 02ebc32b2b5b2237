#include "probes/job_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <openssl/crypto.h>

#include "launcher/error.h"
#include "launcher/thread.h"
#include "probes/digest.h"
#include "probes/socket_io.h"

namespace muster {
namespace {

using Clock = JobServer::Clock;

constexpr size_t kProofSize = 32;  // HMAC-SHA256

// Which end a proof comes from. Each end proves the secret over both nonces, its own last
// and under its own direction's word, so no proof can be reflected back as the other's.
enum class Direction { ClientToServer, ServerToClient };

std::string proof_for(std::string_view secret, std::string_view purpose, Direction direction,
                      std::string_view server_nonce, std::string_view client_nonce) {
  std::string message(purpose);
  message += direction == Direction::ClientToServer ? std::string_view("\0client proves\0", 15)
                                                    : std::string_view("\0server proves\0", 15);
  if (direction == Direction::ClientToServer) message.append(server_nonce).append(client_nonce);
  else message.append(client_nonce).append(server_nonce);
  return hmac_sha256(secret, message);
}

struct Connection {
  long id = 0;
  int fd = -1;
  bool proven = false;
  std::string nonce;  // the server's challenge to this client
  std::string in, out;
  Clock::time_point opened;
  std::optional<Clock::time_point> in_since, out_since;  // a request begun, a reply waiting
  bool input_ended = false;
  bool close_after_flush = false;
};

}  // namespace

std::string new_job_secret() { return to_hex(random_bytes(32)); }

std::string prove_secret(int fd, std::string_view secret, std::string_view purpose,
                         std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  char server_nonce[kNonceSize];
  if (!read_before(fd, server_nonce, sizeof server_nonce, deadline))
    return "the server sent no challenge (it is busy, or not muster's)";
  const std::string client_nonce = random_bytes(kNonceSize);
  const std::string_view challenge(server_nonce, sizeof server_nonce);
  const std::string answer =
      client_nonce + proof_for(secret, purpose, Direction::ClientToServer, challenge, client_nonce);
  char server_proof[kProofSize];
  if (!write_before(fd, answer.data(), answer.size(), deadline) ||
      !read_before(fd, server_proof, sizeof server_proof, deadline))
    return "the server refused this job's secret, or sent no proof of its own";
  const std::string expected = proof_for(secret, purpose, Direction::ServerToClient, challenge, client_nonce);
  if (CRYPTO_memcmp(server_proof, expected.data(), kProofSize) != 0)
    return "the server does not hold the job's secret: refused, nothing sent to it";
  return "";
}

std::string check_secret(int fd, std::string_view secret, std::string_view purpose,
                         std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  const std::string server_nonce = random_bytes(kNonceSize);
  char answer[kNonceSize + kProofSize];
  if (!write_before(fd, server_nonce.data(), server_nonce.size(), deadline) ||
      !read_before(fd, answer, sizeof answer, deadline))
    return "the client sent no proof in time";
  const std::string_view client_nonce(answer, kNonceSize);
  const std::string expected = proof_for(secret, purpose, Direction::ClientToServer, server_nonce, client_nonce);
  if (CRYPTO_memcmp(answer + kNonceSize, expected.data(), kProofSize) != 0)
    return "the client does not hold the job's secret";
  const std::string proof = proof_for(secret, purpose, Direction::ServerToClient, server_nonce, client_nonce);
  return write_before(fd, proof.data(), proof.size(), deadline) ? "" : "the client went away";
}

JobServer::JobServer(const std::string& address, int port, std::string secret, std::string purpose,
                     Protocol& protocol, Limits limits, const char* what)
    : secret_(std::move(secret)), purpose_(std::move(purpose)), protocol_(protocol), limits_(limits) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int yes = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(uint16_t(port));
  socklen_t len = sizeof addr;
  const bool parsed = address.empty() || inet_pton(AF_INET, address.c_str(), &addr.sin_addr) == 1;
  if (listen_fd_ < 0 || !parsed || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listen_fd_, 1024) != 0 ||
      getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    int saved = parsed ? errno : EINVAL;
    for (int fd : {listen_fd_, wake_[0], wake_[1]})
      if (fd >= 0) close(fd);
    throw Error(ErrorKind::Runtime, fmt::format("cannot listen for {} on {}:{}: {}", what,
                                                address.empty() ? "*" : address, port,
                                                std::strerror(saved)));
  }
  port_ = ntohs(addr.sin_port);
  thread_ = signal_free_thread([this] { run(); });
}

JobServer::~JobServer() {
  [[maybe_unused]] auto n = write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(wake_[0]);
  close(wake_[1]);
}

void JobServer::run() {
  std::map<long, Connection> connections;
  long next_id = 0;
  size_t unproven = 0;

  auto drop = [&](std::map<long, Connection>::iterator it) {
    close(it->second.fd);
    if (it->second.proven) protocol_.closed(it->first);
    else --unproven;
    return connections.erase(it);
  };
  auto flush = [&](Connection& c) {
    while (!c.out.empty()) {
      ssize_t n = send(c.fd, c.out.data(), c.out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n <= 0) return n < 0 && (errno == EAGAIN || errno == EINTR);  // false: broken
      c.out.erase(0, size_t(n));
    }
    c.out_since.reset();
    return true;
  };
  auto deliver = [&](Protocol::Replies& replies) {
    for (auto& [id, bytes] : replies) {
      auto it = connections.find(id);
      if (it == connections.end()) continue;  // it closed meanwhile
      if (!it->second.out_since) it->second.out_since = Clock::now();
      it->second.out += bytes;
      flush(it->second);
    }
    replies.clear();
  };
  auto accept_new = [&] {
    for (;;) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      // Over the cap, a connection is closed at once: a flood costs it nothing but a close.
      if (connections.size() >= limits_.max_connections || unproven >= limits_.max_unproven) {
        close(fd);
        continue;
      }
      int yes = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
      Connection c;
      c.id = next_id++;
      c.fd = fd;
      c.nonce = random_bytes(kNonceSize);
      c.out = c.nonce;
      c.out_since = c.opened = Clock::now();
      ++unproven;
      flush(connections.emplace(c.id, std::move(c)).first->second);
    }
  };
  // Reads what arrived and hands whole requests on; false when the connection must close.
  auto receive = [&](Connection& c, Protocol::Replies& replies) {
    char buffer[1 << 16];
    for (int round = 0; round < 16 && !c.input_ended; ++round) {
      const size_t room = limits_.max_buffered - std::min(limits_.max_buffered, c.in.size());
      if (room == 0) return false;  // the protocol would have consumed a request by now
      ssize_t n = recv(c.fd, buffer, std::min(room, sizeof buffer), MSG_DONTWAIT);
      if (n == 0) c.input_ended = true;
      if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
      if (n <= 0) break;
      c.in.append(buffer, size_t(n));
    }
    if (!c.proven) {
      if (c.in.size() < kNonceSize + kProofSize) return !c.input_ended;
      const std::string_view client_nonce(c.in.data(), kNonceSize);
      const std::string expected =
          proof_for(secret_, purpose_, Direction::ClientToServer, c.nonce, client_nonce);
      if (CRYPTO_memcmp(expected.data(), c.in.data() + kNonceSize, kProofSize) != 0) return false;
      c.proven = true;
      --unproven;
      c.out += proof_for(secret_, purpose_, Direction::ServerToClient, c.nonce, client_nonce);
      c.in.erase(0, kNonceSize + kProofSize);
      if (!c.out_since) c.out_since = Clock::now();
    }
    if (!c.in.empty() && !protocol_.serve(c.id, c.in, replies)) return false;
    if (c.in.empty()) c.in_since.reset();
    else if (!c.in_since) c.in_since = Clock::now();
    if (c.input_ended && !c.close_after_flush) {
      protocol_.end_of_input(c.id, replies);
      c.close_after_flush = true;
    }
    return true;
  };

  Protocol::Replies replies;
  for (;;) {
    std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    std::vector<long> ids;
    for (auto& [id, c] : connections) {
      short events = 0;
      if (!c.input_ended && c.in.size() < limits_.max_buffered) events |= POLLIN;
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd, events, 0});
      ids.push_back(id);
    }
    if (poll(fds.data(), fds.size(), 50) < 0 && errno != EINTR) break;
    if (fds[0].revents) break;
    if (fds[1].revents) accept_new();

    for (size_t k = 0; k < ids.size(); ++k) {
      auto it = connections.find(ids[k]);
      if (it == connections.end() || !fds[k + 2].revents) continue;
      Connection& c = it->second;
      bool ok = true;
      if (fds[k + 2].revents & (POLLIN | POLLHUP | POLLERR)) ok = receive(c, replies);
      deliver(replies);
      if (ok && !c.out.empty()) ok = flush(c);
      if (!ok) drop(it);
    }

    const auto now = Clock::now();
    protocol_.tick(now, replies);
    deliver(replies);
    for (auto it = connections.begin(); it != connections.end();) {
      const Connection& c = it->second;
      const bool late = (!c.proven && now - c.opened > limits_.handshake) ||
                        (c.in_since && now - *c.in_since > limits_.message) ||
                        (c.out_since && now - *c.out_since > limits_.message);
      const bool finished = c.close_after_flush && c.out.empty();
      it = late || finished ? drop(it) : std::next(it);
    }
  }
  while (!connections.empty()) drop(connections.begin());
}

}  // namespace muster
