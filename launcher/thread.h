// Helper threads that never receive the process's asynchronous signals. Only the thread
// that waits on them through ShutdownSignals' pipe should: a signal delivered to a helper
// interrupts its poll or read (EINTR), which a helper could take for a silent peer.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <thread>
#include <utility>

namespace muster {

// Starts `fn(args...)` on a new thread with SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD,
// SIGPIPE, SIGALRM and SIGUSR1/2 blocked (the mask is inherited at creation, so there is
// no window in which the new thread could take one).
template <typename Fn, typename... Args>
std::thread signal_free_thread(Fn&& fn, Args&&... args) {
  sigset_t blocked, previous;
  sigemptyset(&blocked);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGPIPE, SIGALRM, SIGUSR1, SIGUSR2})
    sigaddset(&blocked, s);
  pthread_sigmask(SIG_BLOCK, &blocked, &previous);
  // The caller's mask comes back whether or not the thread could be started (std::thread
  // throws when the system is out of threads, and a caller may go on without one).
  struct Restore {
    const sigset_t& mask;
    ~Restore() { pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
  } restore{previous};
  return std::thread(std::forward<Fn>(fn), std::forward<Args>(args)...);
}

}  // namespace muster
