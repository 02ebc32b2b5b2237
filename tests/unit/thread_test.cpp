#include "launcher/thread.h"

#include <signal.h>

#include <stdexcept>

#include <gtest/gtest.h>

namespace muster {
namespace {

// What the calling thread blocks, as a set to compare.
bool blocks(int signal_number) {
  sigset_t now;
  pthread_sigmask(SIG_SETMASK, nullptr, &now);
  return sigismember(&now, signal_number) == 1;
}

// std::thread copies its function before it starts: a copy that throws is a thread that
// could not be started, as when the system is out of threads.
struct ThrowsWhenCopied {
  ThrowsWhenCopied() = default;
  ThrowsWhenCopied(const ThrowsWhenCopied&) { throw std::runtime_error("no thread"); }
  void operator()() const {}
};

TEST(SignalFreeThread, TheNewThreadBlocksTheSignalsAndTheCallerKeepsItsMask) {
  ASSERT_FALSE(blocks(SIGTERM));
  bool blocked_there = false;
  signal_free_thread([&] { blocked_there = blocks(SIGTERM); }).join();
  EXPECT_TRUE(blocked_there);
  EXPECT_FALSE(blocks(SIGTERM));
}

TEST(SignalFreeThread, ACallerWhoseThreadCouldNotStartGetsItsMaskBack) {
  ASSERT_FALSE(blocks(SIGTERM));
  const ThrowsWhenCopied fn;
  EXPECT_THROW(signal_free_thread(fn), std::runtime_error);
  EXPECT_FALSE(blocks(SIGTERM)) << "SIGTERM stayed blocked in the thread that asked";
  EXPECT_FALSE(blocks(SIGINT));
}

}  // namespace
}  // namespace muster
