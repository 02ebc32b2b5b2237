#include "launcher/remote/fanout.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "launcher/thread.h"

namespace muster {

void for_each_node(size_t count, int window, const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  size_t n = std::min<size_t>(count, size_t(std::max(1, window)));
  for (size_t t = 0; t < n; ++t)
    // The node's work waits in poll and read: a Ctrl-C delivered to one of these threads
    // would cut a wait short there instead of reaching the thread that acts on it.
    threads.push_back(signal_free_thread([&] {
      for (size_t i; (i = next.fetch_add(1)) < count;) work(i);
    }));
  for (auto& t : threads) t.join();
}

}  // namespace muster
