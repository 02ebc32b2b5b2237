#include "launcher/local/posix_spawner.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "launcher/error.h"

namespace muster {
namespace {

int g_child_write_fd = -1;  // SIGCHLD handler's only reach

void on_sigchld(int) {
  int saved = errno;
  char byte = 0;
  [[maybe_unused]] auto n = write(g_child_write_fd, &byte, 1);
  errno = saved;
}

// Fields of /proc/PID/stat after the command name: state and process group.
struct ProcStat {
  char state = '?';
  pid_t pgrp = -1;
};

std::optional<ProcStat> read_proc_stat(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text;
  if (!std::getline(in, text)) return std::nullopt;
  // The command name is in parentheses and may itself hold spaces and parentheses.
  auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(close + 1));
  ProcStat s;
  pid_t ppid = 0;
  rest >> s.state >> ppid >> s.pgrp;
  return s;
}

std::vector<pid_t> all_pids() {
  std::vector<pid_t> out;
  DIR* dir = opendir("/proc");
  if (!dir) return out;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (end && *end == '\0' && pid > 0) out.push_back(pid_t(pid));
  }
  closedir(dir);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

// execvpe searches the PATH of the calling process; a rank's PATH is in its own spec.
std::optional<std::string> find_program(const std::string& name, const Environment& env) {
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), X_OK) == 0) return name;
    return std::nullopt;
  }
  std::string path = env.has("PATH") ? env.get("PATH") : "/usr/local/bin:/usr/bin:/bin";
  std::istringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

PosixSpawner::PosixSpawner() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw Error(ErrorKind::Runtime, "cannot create a pipe for child events");
  child_read_fd_ = fds[0];
  g_child_write_fd = fds[1];
  struct sigaction action = {};
  action.sa_handler = on_sigchld;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &action, nullptr);
  // Orphaned grandchildren come to us instead of init, so none escapes being reaped.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
}

PosixSpawner::~PosixSpawner() {
  signal(SIGCHLD, SIG_DFL);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  close(child_read_fd_);
  close(g_child_write_fd);
  g_child_write_fd = -1;
}

SpawnedProcess PosixSpawner::spawn(const ProcessSpec& spec) {
  if (spec.argv.empty()) throw Error(ErrorKind::Usage, "no command to run");
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<std::string> argv = spec.argv;
  std::vector<std::string> envp = spec.env.to_strings();
  std::vector<char*> c_argv = c_strings(argv), c_envp = c_strings(envp);
  const std::string program =
      spec.program ? *spec.program : find_program(spec.argv[0], spec.env).value_or(spec.argv[0]);
  const char* workdir = spec.workdir ? spec.workdir->c_str() : nullptr;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int cpu : spec.cpus) CPU_SET(cpu, &cpus);

  int out[2] = {-1, -1}, err[2] = {-1, -1}, status_pipe[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {out[0], out[1], err[0], err[1], status_pipe[0], status_pipe[1]})
      if (fd >= 0) close(fd);
  };
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 ||
      pipe2(status_pipe, O_CLOEXEC) != 0) {
    int saved = errno;
    close_all();
    throw Error(ErrorKind::Runtime, fmt::format("cannot create pipes: {}", strerror(saved)));
  }

  pid_t pid = fork();
  if (pid < 0) {
    int saved = errno;
    close_all();
    throw Error(ErrorKind::Runtime, fmt::format("fork failed: {}", strerror(saved)));
  }
  if (pid == 0) {
    // A session of its own: its process group is what teardown signals, grandchildren included.
    setsid();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) signal(s, SIG_DFL);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    int failure = 0;
    const char* step = "exec";
    if (workdir && chdir(workdir) != 0) { failure = errno; step = "chdir"; }
    if (!failure && !spec.cpus.empty() && sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
      failure = errno; step = "bind";
    }
    if (!failure) {
      execve(program.c_str(), c_argv.data(), c_envp.data());
      failure = errno;
    }
    int report[2] = {failure, step[0]};
    [[maybe_unused]] auto n = write(status_pipe[1], report, sizeof report);
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  close(status_pipe[1]);
  int report[2] = {0, 0};
  ssize_t got;
  do { got = read(status_pipe[0], report, sizeof report); } while (got < 0 && errno == EINTR);
  close(status_pipe[0]);
  if (got == ssize_t(sizeof report)) {
    int status = 0;
    waitpid(pid, &status, 0);
    close(out[0]);
    close(err[0]);
    std::string what = report[1] == 'c'   ? fmt::format("cannot enter '{}'", *spec.workdir)
                       : report[1] == 'b' ? std::string("cannot bind to its CPUs")
                                          : fmt::format("cannot execute '{}'", spec.argv[0]);
    throw Error(ErrorKind::Runtime, fmt::format("{}: {}", what, strerror(report[0])));
  }
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  leaders_.insert(pid);
  return {pid, out[0], err[0]};
}

void PosixSpawner::signal_group(pid_t pgid, int signal) { kill(-pgid, signal); }

void PosixSpawner::signal_process(pid_t pid, int signal) { kill(pid, signal); }

std::vector<ProcessExit> PosixSpawner::reap() {
  char drain[64];
  while (read(child_read_fd_, drain, sizeof drain) > 0) {}
  std::vector<ProcessExit> exits;
  int status = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    if (leaders_.erase(pid)) exits.push_back({pid, ExitStatus::from_wait_status(status)});
  }
  return exits;
}

std::vector<pid_t> PosixSpawner::live_group_members(pid_t pgid) {
  std::vector<pid_t> out;
  if (kill(-pgid, 0) != 0) return out;  // no process at all in the group: the common case
  for (pid_t pid : all_pids()) {
    auto stat = read_proc_stat(pid);
    if (stat && stat->pgrp == pgid && stat->state != 'Z' && stat->state != 'X') out.push_back(pid);
  }
  return out;
}

std::vector<pid_t> PosixSpawner::escaped_job_processes(const std::vector<std::string>& markers,
                                                       const std::vector<pid_t>& except_groups) {
  std::vector<pid_t> out;
  for (pid_t pid : all_pids()) {
    if (pid == getpid()) continue;
    auto stat = read_proc_stat(pid);
    if (!stat || stat->state == 'Z' || stat->state == 'X') continue;
    if (std::find(except_groups.begin(), except_groups.end(), stat->pgrp) != except_groups.end())
      continue;
    std::ifstream in(fmt::format("/proc/{}/environ", pid), std::ios::binary);
    std::string entry;
    size_t matched = 0;
    while (std::getline(in, entry, '\0'))
      matched += std::count(markers.begin(), markers.end(), entry);
    if (matched == markers.size()) out.push_back(pid);
  }
  return out;
}

std::string PosixSpawner::describe_process(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
  std::string cmdline, part;
  while (std::getline(in, part, '\0')) cmdline += (cmdline.empty() ? "" : " ") + part;
  auto stat = read_proc_stat(pid);
  std::string state = stat ? fmt::format(", state {}", stat->state) : "";
  return fmt::format("pid {} ({}{})", pid, cmdline.empty() ? "?" : cmdline, state);
}

}  // namespace muster
