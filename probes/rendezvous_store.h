// The rendezvous muster provides for a job's probe ranks: a small key-value store that rank
// 0 serves on MASTER_ADDR:MASTER_PORT (a port chosen at run time), through which ranks swap
// what they need to connect (Gloo's addresses, NCCL's unique id). Only clients that hold the
// job's secret get in (JobServer); keys and values are bounded before anything is allocated.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "launcher/error.h"
#include "probes/job_server.h"

namespace muster {

// Bounds of what the store accepts: far above what Gloo and NCCL exchange.
inline constexpr size_t kMaxRendezvousKey = 4096;
inline constexpr size_t kMaxRendezvousValue = size_t(1) << 20;
inline constexpr size_t kMaxRendezvousBytes = size_t(256) << 20;  // everything stored

// The store's wire protocol, on its own so that it can be tested and fuzzed without
// sockets: 'S' key value -> 'O'; 'G' key wait_ms -> 'V' value | 'T' (no such key in time).
// Strings are a 32-bit length and bytes; wait_ms is 32 bits; all little-endian.
class RendezvousProtocol : public JobServer::Protocol {
 public:
  bool serve(long id, std::string& in, Replies& replies) override;
  void tick(JobServer::Clock::time_point now, Replies& replies) override;
  void closed(long id) override;

 private:
  struct Waiting {
    long id;
    std::string key;
    JobServer::Clock::time_point until;
  };
  std::map<std::string, std::string> values_;
  size_t stored_bytes_ = 0;
  std::vector<Waiting> waiting_;
};

// Serves the store on `address`:`port` until destroyed.
class RendezvousServer {
 public:
  RendezvousServer(const std::string& address, int port, const std::string& secret);
  int port() const { return server_.port(); }

 private:
  RendezvousProtocol protocol_;
  JobServer server_;
};

// The store answered that a key did not appear in time: its writer never got there, as
// opposed to a store that went away (rank 0 ended), which is a plain Error.
class RendezvousTimedOut : public Error {
 public:
  explicit RendezvousTimedOut(std::string message) : Error(ErrorKind::Runtime, std::move(message)) {}
};

// One rank's connection to the store. Not thread-safe.
class RendezvousClient {
 public:
  // Connects and proves the job's secret, retrying until `limit` (rank 0 may not be
  // listening yet, or be busy shedding strangers).
  RendezvousClient(const std::string& host, int port, const std::string& secret,
                   std::chrono::milliseconds limit);
  ~RendezvousClient();
  void set(const std::string& key, const std::string& value);
  // Waits up to `limit` for the key. Throws RendezvousTimedOut naming the key on timeout,
  // Error(Runtime) when the connection breaks.
  std::string get(const std::string& key, std::chrono::milliseconds limit);

 private:
  int fd_ = -1;
};

// The purpose string of the rendezvous' handshake.
inline constexpr const char* kRendezvousPurpose = "muster rendezvous v1";

}  // namespace muster
