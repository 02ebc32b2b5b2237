#include "launcher/remote/fanout.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace muster {

void for_each_node(size_t count, int window, const std::function<void(size_t)>& work) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  size_t n = std::min<size_t>(count, size_t(std::max(1, window)));
  for (size_t t = 0; t < n; ++t)
    threads.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < count;) work(i);
    });
  for (auto& t : threads) t.join();
}

}  // namespace muster
