// The rendezvous muster provides for a job's ranks: a small key-value store that rank 0
// serves on MASTER_ADDR:MASTER_PORT (a port chosen at run time), through which ranks swap
// what they need to connect (Gloo's addresses, NCCL's unique id).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace muster {

// Serves the store on every address of `port` until destroyed.
class RendezvousServer {
 public:
  explicit RendezvousServer(int port);
  ~RendezvousServer();

 private:
  void accept_loop();
  void serve(int fd);
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
  std::thread thread_;
  std::vector<std::thread> connections_;
  bool stopping_ = false;
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
