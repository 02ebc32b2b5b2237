// The TCP servers muster starts for a job (the rendezvous, the probe server) face a
// network where anyone may connect. JobServer is what they share: both ends first prove they
// hold the job's secret (a challenge-response with an HMAC each way, so the secret never
// crosses the network and neither end takes the other's word); connections are capped; a handshake, a request once begun and a reply once
// queued each have a deadline; buffered bytes are bounded; and one thread serves every
// connection, so nothing grows with the number of clients.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace muster {

// The handshake, before anything else crosses the connection:
//   server -> client  its nonce (16 bytes)
//   client -> server  its own nonce, then HMAC-SHA256(secret, purpose, "client proves",
//                     server nonce, client nonce)
//   server -> client  HMAC-SHA256(secret, purpose, "server proves", client nonce, server nonce)
// Each end challenges the other with a fresh nonce, so neither proof can be replayed; the
// direction's word keeps one end's proof from being reflected as the other's; the purpose
// keeps a proof for one kind of server from being replayed to another. A client sends
// nothing of its own (a node's name, a hello, a request) until the server has proven itself.
inline constexpr size_t kNonceSize = 16;

// A fresh secret for a job: 32 random bytes, hex-encoded (it travels in JSON over SSH).
std::string new_job_secret();

// The client's side of the handshake on connected socket `fd`: reads the server's nonce,
// answers it with its own nonce and proof, and checks the server's proof, all within `limit`.
// Returns "" once both are proven, else why not.
std::string prove_secret(int fd, std::string_view secret, std::string_view purpose,
                         std::chrono::milliseconds limit);

// The server's side of the same handshake on accepted socket `fd`, for a server that keeps
// each proven connection for itself (the Slurm launcher's agents calling back): sends a
// nonce, checks the client's proof and answers with its own, all within `limit`. Returns ""
// on success, else why not.
std::string check_secret(int fd, std::string_view secret, std::string_view purpose,
                         std::chrono::milliseconds limit);

class JobServer {
 public:
  using Clock = std::chrono::steady_clock;

  struct Limits {
    size_t max_connections = 256;              // all connections together
    size_t max_unproven = 64;                  // of which still in the handshake
    std::chrono::milliseconds handshake{3000}; // to prove the secret
    std::chrono::milliseconds message{10000};  // to finish a request begun, or take a reply
    size_t max_buffered = size_t(2) << 20;     // bytes of one connection not yet consumed
  };

  // What the server speaks once a client has proven the secret. Called on the server's
  // thread only. Connections are named by an id that is never reused.
  class Protocol {
   public:
    using Replies = std::vector<std::pair<long, std::string>>;  // connection id, bytes
    virtual ~Protocol() = default;
    // Consumes whole requests from `in`, appending replies for any connection. Returns
    // false when the bytes are not this protocol (the connection is then closed).
    virtual bool serve(long id, std::string& in, Replies& replies) = 0;
    // The client will send nothing more: last replies, after which the connection closes.
    virtual void end_of_input(long id, Replies& replies) { (void)id, (void)replies; }
    // Called at least every 50 ms, for requests that wait with a limit of their own.
    virtual void tick(Clock::time_point now, Replies& replies) { (void)now, (void)replies; }
    virtual void closed(long id) { (void)id; }
  };

  // Listens on `address` (an IPv4 address; "" for every address) and `port` (0: one the
  // kernel picks) and serves `protocol` until destroyed. Throws Error(Runtime) naming `what`.
  JobServer(const std::string& address, int port, std::string secret, std::string purpose,
            Protocol& protocol, Limits limits, const char* what);
  ~JobServer();
  JobServer(const JobServer&) = delete;
  JobServer& operator=(const JobServer&) = delete;

  int port() const { return port_; }

 private:
  void run();

  int listen_fd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::string secret_, purpose_;
  Protocol& protocol_;
  Limits limits_;
  std::thread thread_;
};

}  // namespace muster
