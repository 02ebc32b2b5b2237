#include "launcher/local/command_within.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include <fmt/format.h>

#include "launcher/cluster/environment.h"
#include "launcher/error.h"
#include "launcher/local/posix_spawner.h"

namespace muster {

// Its own pipes and waitpid on its pid alone: the head may have other children (srun) whose
// ends belong to other threads, and a PosixSpawner would reap them (waitpid(-1)) and take
// over SIGCHLD.
CommandOutput run_within(const std::vector<std::string>& argv, std::chrono::milliseconds deadline) {
  int out[2] = {-1, -1}, err[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {out[0], out[1], err[0], err[1]})
      if (fd >= 0) close(fd);
  };
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    close_all();
    throw Error(ErrorKind::Runtime, fmt::format("cannot run {}: no pipe: {}", argv.front(), std::strerror(errno)));
  }
  // Only muster's ends wait for nothing: the command's own stdout and stderr block as usual.
  for (int fd : {out[0], err[0]}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  pid_t pid = -1;
  try {
    pid = spawn_helper(argv, Environment::current(), out[1], err[1], /*own_session=*/true);
  } catch (...) {
    close_all();
    throw;
  }
  close(out[1]);
  close(err[1]);
  CommandOutput result;
  const auto until = std::chrono::steady_clock::now() + deadline;
  int fds[2] = {out[0], err[0]};
  std::string* sinks[2] = {&result.out, &result.err};
  bool ended = false;
  while (!ended || fds[0] >= 0 || fds[1] >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill(-pid, SIGKILL);  // its session, and so its process group, is its own
      while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {}
      for (int fd : fds)
        if (fd >= 0) close(fd);
      throw Error(ErrorKind::Runtime, fmt::format("{} did not answer within {:g} s", argv.front(),
                                                  deadline.count() / 1e3));
    }
    pollfd polled[2];
    for (int i = 0; i < 2; ++i) polled[i] = {fds[i], POLLIN, 0};
    poll(polled, 2, int(std::min<long long>(left.count(), 50)));
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || !(polled[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buffer[4096];
      const ssize_t n = read(fds[i], buffer, sizeof buffer);
      if (n > 0 && sinks[i]->size() < (1 << 20)) sinks[i]->append(buffer, size_t(n));
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        close(fds[i]);
        fds[i] = -1;
      }
    }
    int status = 0;
    if (!ended && waitpid(pid, &status, WNOHANG) == pid) {
      result.status = ExitStatus::from_wait_status(status);
      ended = true;
    }
  }
  return result;
}

CommandOutput run_checked_within(const std::vector<std::string>& argv, std::chrono::milliseconds deadline,
                                 const std::string& subject) {
  CommandOutput r;
  try {
    r = run_within(argv, deadline);
  } catch (const Error& e) {
    throw Error(ErrorKind::Runtime, fmt::format("{}: {}", subject, e.what()));
  }
  if (!r.status.success()) {
    std::string said = r.err.empty() ? r.out : r.err;
    while (!said.empty() && said.back() == '\n') said.pop_back();
    throw Error(ErrorKind::Runtime, fmt::format("{}: {} {} {}: {}", subject, argv.at(0), argv.size() > 1 ? argv[1] : "",
                                                r.status.describe(), said.substr(0, 300)));
  }
  return r;
}

}  // namespace muster
