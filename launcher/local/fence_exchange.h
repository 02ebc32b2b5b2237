// What carries an MPI library's fences between a job's nodes: each node's services give their
// part of a fence (PMIx's modex blob, PMI-1's puts since the last barrier), and once every
// node has given its part, each gets all of them. Across nodes the head gathers them over
// the agents' channels (launcher/job/session_job.cpp), as slurmstepd's pmix plugin and
// Hydra's proxies do; a job on one node completes a fence at once.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launcher/local/pmix_status.h"

namespace muster {

// The most one fence may carry, every node's parts together (their bytes, as the services
// give them): the head sends them all to every node. Open MPI's modex is a few hundred bytes
// a rank; MPICH's business cards as much. The frames that carry fences are sized from it
// (launcher/remote/agent_protocol.h), and so is PMI-1's key-value space (pmi1.h).
inline constexpr size_t kMaxFenceBytes = size_t(64) << 20;

class FenceExchange {
 public:
  virtual ~FenceExchange() = default;
  // This node's part of fence `number` of `protocol` ("pmix", "pmi1"); a protocol's fences
  // are numbered from 0 in the order they complete, the same on every node.
  virtual void contribute(std::string_view protocol, int number, std::string part) = 0;
  // Every node's part of that fence, in node order, once all arrived (taken once).
  virtual std::optional<std::vector<std::string>> completed(std::string_view protocol, int number) = 0;
  // Readable when a fence may have completed, or a fetch arrived (-1: nothing ever waits).
  virtual int ready_fd() const = 0;

  // Direct modex: a rank here asked for rank `rank`'s data, which no fence carried; its node
  // is asked for it. `id` is this node's own number for the request.
  virtual void fetch(int id, int rank) = 0;
  // The answer to fetch `id` (PMIx's status and the data), once it came back (taken once).
  struct Fetched {
    int status = 0;
    std::string data;
  };
  virtual std::optional<Fetched> fetched(int id) = 0;
  // What other nodes asked of this node's ranks: (request, rank), each to be answered once.
  virtual std::vector<std::pair<int, int>> take_fetch_requests() = 0;
  virtual void answer_fetch(int request, int status, std::string data) = 0;
};

// A job whose ranks are all on this node: its part is the whole.
class OneNodeExchange : public FenceExchange {
 public:
  void contribute(std::string_view protocol, int number, std::string part) override {
    done_.push_back({std::string(protocol), number, std::move(part)});
  }
  std::optional<std::vector<std::string>> completed(std::string_view protocol, int number) override {
    for (auto it = done_.begin(); it != done_.end(); ++it)
      if (it->protocol == protocol && it->number == number) {
        std::vector<std::string> parts{std::move(it->part)};
        done_.erase(it);
        return parts;
      }
    return std::nullopt;
  }
  int ready_fd() const override { return -1; }
  // Every rank is here, and the library answers a rank's data itself: nothing is fetched.
  void fetch(int id, int) override { unanswerable_.push_back(id); }
  std::optional<Fetched> fetched(int id) override {
    for (auto it = unanswerable_.begin(); it != unanswerable_.end(); ++it)
      if (*it == id) {
        unanswerable_.erase(it);
        return Fetched{kPmixErrNotFound, ""};
      }
    return std::nullopt;
  }
  std::vector<std::pair<int, int>> take_fetch_requests() override { return {}; }
  void answer_fetch(int, int, std::string) override {}

 private:
  std::vector<int> unanswerable_;
  struct Done {
    std::string protocol;
    int number = 0;
    std::string part;
  };
  std::vector<Done> done_;
};

}  // namespace muster
