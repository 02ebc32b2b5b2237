#include "launcher/local/command_within.h"

#include <poll.h>
#include <unistd.h>

#include <csignal>

#include <fmt/format.h>

#include "launcher/cluster/environment.h"
#include "launcher/error.h"
#include "launcher/local/posix_spawner.h"

namespace muster {

CommandOutput run_within(const std::vector<std::string>& argv, std::chrono::milliseconds deadline) {
  PosixSpawner spawner;
  ProcessSpec spec;
  spec.argv = argv;
  spec.env = Environment::current();
  SpawnedProcess p = spawner.spawn(spec);
  CommandOutput result;
  const auto until = std::chrono::steady_clock::now() + deadline;
  bool ended = false;
  int open_fds = 2;
  int fds[2] = {p.stdout_fd, p.stderr_fd};
  std::string* sinks[2] = {&result.out, &result.err};
  while (!ended || open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      spawner.signal_group(p.pid, SIGKILL);
      for (int fd : fds)
        if (fd >= 0) close(fd);
      throw Error(ErrorKind::Runtime, fmt::format("{} did not answer within {:g} s", argv.front(),
                                                  deadline.count() / 1e3));
    }
    pollfd polled[2];
    for (int i = 0; i < 2; ++i) polled[i] = {fds[i], POLLIN, 0};
    poll(polled, 2, int(std::min<long long>(left.count(), 50)));
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0) continue;
      char buffer[4096];
      const ssize_t n = read(fds[i], buffer, sizeof buffer);
      if (n > 0 && sinks[i]->size() < (1 << 20)) sinks[i]->append(buffer, size_t(n));
      if (n == 0) {
        close(fds[i]);
        fds[i] = -1;
        --open_fds;
      }
    }
    for (const auto& exit : spawner.reap())
      if (exit.pid == p.pid) {
        result.status = exit.status;
        ended = true;
      }
  }
  return result;
}

}  // namespace muster

