// A collective communication backend (Gloo on CPUs, NCCL on GPUs) behind one small
// interface, so that the smoke sweep is the same code for both and testable with a fake.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/error.h"

namespace muster {

enum class CollectiveOp { Barrier, AllReduce, AllGather, ReduceScatter, Broadcast };

// "all_reduce", ...
const char* op_name(CollectiveOp op);
// The op named `name` ("all_reduce", ...), if any.
std::optional<CollectiveOp> op_from_name(const std::string& name);

// A collective this rank gave up on because its peers did not do their part within the
// backend's timeout: the mark of a rank that hung, as opposed to one that failed.
class CollectiveTimedOut : public Error {
 public:
  explicit CollectiveTimedOut(std::string message) : Error(ErrorKind::Runtime, std::move(message)) {}
};

// A collective that failed because a peer's connection closed under it: a consequence of
// that peer's end (it gave up, crashed or was stopped), not a cause of this rank's own.
class CollectivePeerLost : public Error {
 public:
  explicit CollectivePeerLost(std::string message) : Error(ErrorKind::Runtime, std::move(message)) {}
};

// One group of ranks that can run collectives on float32 buffers.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual std::string backend() const = 0;  // "gloo" or "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Buffers live where the backend computes (host memory for Gloo, GPU memory for NCCL).
  virtual float* allocate(size_t elements) = 0;
  virtual void release(float* buffer) = 0;
  virtual void upload(float* buffer, const std::vector<float>& host) = 0;
  virtual std::vector<float> download(const float* buffer, size_t elements) = 0;

  // Runs one collective to completion. `count` is elements per rank: all-reduce and
  // broadcast use `count` in both buffers; all-gather sends `count` and receives
  // size()*count; reduce-scatter sends size()*count and receives `count`. Throws
  // CollectiveTimedOut when it does not finish within the backend's timeout, Error(Runtime)
  // when it fails.
  virtual void run(CollectiveOp op, const float* send, float* recv, size_t count) = 0;
  // Runs the same collective `times` times and returns when the last has finished: how a
  // timed loop runs, as nccl-tests times it. A backend that queues work (NCCL, on a stream)
  // queues them back to back and waits once, so the time is the GPU's and not that of a
  // host's wait after each; the timeout still bounds each collective, not the loop.
  virtual void run_repeatedly(CollectiveOp op, const float* send, float* recv, size_t count, int times) {
    for (int i = 0; i < times; ++i) run(op, send, recv, count);
  }

  // A sub-group of the given ranks (every rank calls this with the same arguments);
  // nullptr for ranks outside it.
  virtual std::unique_ptr<Collective> subgroup(const std::string& name,
                                               const std::vector<int>& members) = 0;
};

}  // namespace muster
