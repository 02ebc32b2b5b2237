// Work that may hang (NVML on a wedged GPU, a file system that stopped answering) run on a
// thread of its own and waited for until a deadline. Past it the thread is left to end with
// the process: a read stuck in the kernel or a driver cannot be cancelled, only abandoned.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "launcher/thread.h"

namespace muster {

// `work`'s result, or nullopt when it did not finish within `deadline`. What `work` uses
// must be its own (captured by value or shared): it may outlive this call. It must not throw.
template <typename Result>
std::optional<Result> finish_within(std::chrono::milliseconds deadline, std::function<Result()> work) {
  struct Shared {
    std::mutex mutex;
    std::condition_variable finished;
    std::optional<Result> result;
  };
  auto shared = std::make_shared<Shared>();
  std::thread worker = signal_free_thread([shared, work = std::move(work)] {
    Result result = work();
    std::lock_guard lock(shared->mutex);
    shared->result = std::move(result);
    shared->finished.notify_all();
  });
  std::unique_lock lock(shared->mutex);
  if (shared->finished.wait_for(lock, deadline, [&] { return shared->result.has_value(); })) {
    Result result = std::move(*shared->result);
    lock.unlock();
    // Joined, not left: a thread that ends after muster has exited keeps what it held
    // (glibc's dlerror buffer, from a library that did not load) from being freed.
    worker.join();
    return result;
  }
  lock.unlock();
  worker.detach();
  return std::nullopt;
}

}  // namespace muster
