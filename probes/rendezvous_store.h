// The rendezvous muster provides for a job's ranks: a small key-value store that rank 0
// serves on MASTER_ADDR:MASTER_PORT (a port chosen at run time), through which ranks swap
// what they need to connect (Gloo's addresses, NCCL's unique id).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "probes/socket_io.h"

namespace muster {

// Serves the store on every address of `port` until destroyed.
class RendezvousServer {
 public:
  explicit RendezvousServer(int port);

 private:
  // The values live apart from the server so that a connection thread still blocked in a
  // wait when rank 0 leaves never touches freed memory.
  struct Values {
    std::mutex mutex;
    std::condition_variable changed;
    std::map<std::string, std::string> by_key;
  };
  static void serve(const std::shared_ptr<Values>& values, int fd);
  std::shared_ptr<Values> values_ = std::make_shared<Values>();
  TcpListener listener_;
};

// One rank's connection to the store. Not thread-safe.
class RendezvousClient {
 public:
  // Connects, retrying until `limit` (rank 0 may not be listening yet).
  RendezvousClient(const std::string& host, int port, std::chrono::milliseconds limit);
  ~RendezvousClient();
  void set(const std::string& key, const std::string& value);
  // Waits up to `limit` for the key. Throws Error(Runtime) naming the key on timeout.
  std::string get(const std::string& key, std::chrono::milliseconds limit);

 private:
  int fd_ = -1;
};

}  // namespace muster
