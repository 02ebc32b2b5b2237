#include "launcher/local/exit_status.h"

#include <sys/wait.h>

#include <csignal>
#include <cstring>

#include <fmt/format.h>

namespace muster {

ExitStatus ExitStatus::from_wait_status(int status) {
  if (WIFSIGNALED(status)) return signaled(WTERMSIG(status));
  return exited(WEXITSTATUS(status));
}

int signal_number(std::string_view abbrev) {
  for (int n = 1; n < NSIG; ++n)
    if (const char* name = sigabbrev_np(n); name && abbrev == name) return n;
  return 0;
}

std::string ExitStatus::describe() const {
  if (kind == Kind::Exited) return fmt::format("exited with status {}", code);
  const char* abbrev = sigabbrev_np(signal);
  return fmt::format("was killed by SIG{} (signal {})", abbrev ? abbrev : "?", signal);
}

}  // namespace muster
