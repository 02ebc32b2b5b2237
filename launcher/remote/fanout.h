// Doing something for every node concurrently, with a bounded window.
#pragma once

#include <cstddef>
#include <functional>

namespace muster {

// The default window: below sshd's default MaxStartups of 10, which drops unauthenticated
// connections beyond it (field notes #11).
inline constexpr int kDefaultFanout = 8;

// Calls `work(i)` for i in [0, count) on at most `window` threads at once; a slow call only
// holds its own slot. Returns when every call has returned; `work` must not throw.
void for_each_node(size_t count, int window, const std::function<void(size_t)>& work);

}  // namespace muster
