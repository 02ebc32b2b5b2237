#include "launcher/local/posix_spawner.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <set>
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

// The processes below this one, read from each task's list of children. Every process of
// a rank stays below muster, a child subreaper (an orphan comes to it, not to init), so
// this finds what a scan of all /proc would, without reading every process of a busy node
// (with 1000 processes that cost each job's end 30 ms of CPU). Where the kernel keeps no
// such lists (built without CONFIG_PROC_CHILDREN), every process is a candidate.
std::vector<pid_t> processes_below_this_one() {
  const std::string own_list = fmt::format("/proc/self/task/{}/children", gettid());
  if (access(own_list.c_str(), R_OK) != 0) return all_pids();
  std::vector<pid_t> below, frontier{getpid()};
  std::set<pid_t> seen{getpid()};
  while (!frontier.empty()) {
    const pid_t parent = frontier.back();
    frontier.pop_back();
    DIR* tasks = opendir(fmt::format("/proc/{}/task", parent).c_str());
    if (!tasks) continue;  // it ended meanwhile
    while (dirent* task = readdir(tasks)) {
      if (task->d_name[0] == '.') continue;
      std::ifstream list(fmt::format("/proc/{}/task/{}/children", parent, task->d_name));
      pid_t child = 0;
      while (list >> child)
        if (seen.insert(child).second) {  // a pid reused meanwhile cannot make a cycle
          below.push_back(child);
          frontier.push_back(child);
        }
    }
    closedir(tasks);
  }
  return below;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

namespace {
// Where a command `name` (no '/') may be, in the PATH's order.
std::vector<std::string> places_in_path(const std::string& name, const Environment& env) {
  std::vector<std::string> places;
  std::istringstream dirs(env.has("PATH") ? env.get("PATH") : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) places.push_back((dir.empty() ? "." : dir) + "/" + name);
  return places;
}
}  // namespace

// execvpe searches the PATH of the calling process; a rank's PATH is in its own spec.
std::optional<std::string> find_program(const std::string& name, const Environment& env) {
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), X_OK) == 0) return name;
    return std::nullopt;
  }
  for (const auto& candidate : places_in_path(name, env))
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  return std::nullopt;
}

namespace {
// Why the file `path`, which exists, is not a command; "" when it is one.
std::string why_not_executable(const std::string& path) {
  struct stat st = {};
  if (stat(path.c_str(), &st) != 0) return "";
  if (S_ISDIR(st.st_mode)) return "is a directory, not a program";
  if (access(path.c_str(), X_OK) != 0)
    return fmt::format("is not executable (mode {:04o}); make it so with chmod +x, or name its "
                       "interpreter first (python3 {})", st.st_mode & 07777, path);
  return "";
}
}  // namespace

void check_command_runs(const std::string& name, const Environment& env) {
  if (name.find('/') != std::string::npos) {
    if (access(name.c_str(), F_OK) != 0)
      throw Error(ErrorKind::CommandNotFound, fmt::format("'{}': no such file", name));
    if (std::string why = why_not_executable(name); !why.empty())
      throw Error(ErrorKind::CommandNotExecutable, fmt::format("'{}': {}", name, why));
    return;
  }
  if (find_program(name, env)) return;
  // A file of that name in the PATH that is not executable is what a shell would report.
  for (const auto& candidate : places_in_path(name, env)) {
    if (access(candidate.c_str(), F_OK) != 0) continue;
    if (std::string why = why_not_executable(candidate); !why.empty())
      throw Error(ErrorKind::CommandNotExecutable, fmt::format("'{}': {} {}", name, candidate, why));
  }
  throw Error(ErrorKind::CommandNotFound, fmt::format("'{}': command not found in PATH", name));
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

namespace {

// posix_spawn has no attribute for CPU affinity, but a child inherits the affinity of the
// thread that starts it: this thread takes the rank's CPUs for the moment of the spawn.
class AffinityForSpawn {
 public:
  explicit AffinityForSpawn(const std::vector<int>& cpus) {
    if (cpus.empty()) return;
    cpu_set_t wanted;
    CPU_ZERO(&wanted);
    for (int cpu : cpus) CPU_SET(cpu, &wanted);
    if (sched_getaffinity(0, sizeof saved_, &saved_) != 0 ||
        sched_setaffinity(0, sizeof wanted, &wanted) != 0)
      throw Error(ErrorKind::Runtime, fmt::format("cannot bind to its CPUs: {}", strerror(errno)));
    changed_ = true;
  }
  ~AffinityForSpawn() {
    if (changed_) sched_setaffinity(0, sizeof saved_, &saved_);
  }
  AffinityForSpawn(const AffinityForSpawn&) = delete;
  AffinityForSpawn& operator=(const AffinityForSpawn&) = delete;

 private:
  cpu_set_t saved_{};
  bool changed_ = false;
};

// What the child does between its start and exec, as posix_spawn's attributes and file
// actions: a session of its own (its process group is what teardown signals, grandchildren
// included), no blocked signals, default handling of the ones muster catches or ignores,
// stdout and stderr to the pipes, stdin from /dev/null, and its working directory.
class ChildSetup {
 public:
  ChildSetup(int stdout_fd, int stderr_fd, const char* workdir, bool own_session = true) {
    posix_spawnattr_init(&attr_);
    posix_spawn_file_actions_init(&actions_);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) sigaddset(&defaults, s);
    posix_spawnattr_setsigmask(&attr_, &none);
    posix_spawnattr_setsigdefault(&attr_, &defaults);
    posix_spawnattr_setflags(&attr_, (own_session ? POSIX_SPAWN_SETSID : 0) | POSIX_SPAWN_SETSIGMASK |
                                         POSIX_SPAWN_SETSIGDEF);
    posix_spawn_file_actions_adddup2(&actions_, stdout_fd, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions_, stderr_fd, STDERR_FILENO);
    posix_spawn_file_actions_addopen(&actions_, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    if (workdir) posix_spawn_file_actions_addchdir_np(&actions_, workdir);
  }
  ~ChildSetup() {
    posix_spawn_file_actions_destroy(&actions_);
    posix_spawnattr_destroy(&attr_);
  }
  ChildSetup(const ChildSetup&) = delete;
  ChildSetup& operator=(const ChildSetup&) = delete;

  // Our descriptor `fd` becomes the child's `as` (a different number: dup2 onto another
  // descriptor clears close-on-exec).
  void inherit(int fd, int as) { posix_spawn_file_actions_adddup2(&actions_, fd, as); }

  const posix_spawn_file_actions_t* actions() const { return &actions_; }
  const posix_spawnattr_t* attributes() const { return &attr_; }

 private:
  posix_spawnattr_t attr_;
  posix_spawn_file_actions_t actions_;
};

bool can_enter(const char* dir) {
  struct stat st;
  return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && access(dir, X_OK) == 0;
}

}  // namespace

pid_t spawn_helper(const std::vector<std::string>& argv, const Environment& env, int out_fd,
                   int err_fd, bool own_session) {
  std::vector<std::string> args = argv, envp = env.to_strings();
  std::vector<char*> c_argv = c_strings(args), c_envp = c_strings(envp);
  const auto program = find_program(argv.at(0), env);
  if (!program)
    throw Error(ErrorKind::Runtime, fmt::format("cannot start {}: it is not on the PATH", argv[0]));
  ChildSetup setup(out_fd, err_fd, nullptr, own_session);
  pid_t pid = -1;
  if (int failure = posix_spawn(&pid, program->c_str(), setup.actions(), setup.attributes(),
                                c_argv.data(), c_envp.data()))
    throw Error(ErrorKind::Runtime, fmt::format("cannot start {}: {}", argv[0], strerror(failure)));
  return pid;
}

// posix_spawn, not fork: glibc starts the child with vfork semantics, so nothing of this
// process's memory is copied or faulted in for a child that execs at once. A fork of the
// agent cost about 11 ms of CPU per rank in a VM, where page-table copies trap.
SpawnedProcess PosixSpawner::spawn(const ProcessSpec& spec) {
  if (spec.argv.empty()) throw Error(ErrorKind::Usage, "no command to run");
  std::vector<std::string> argv = spec.argv;
  std::vector<std::string> envp = spec.env.to_strings();
  std::vector<char*> c_argv = c_strings(argv), c_envp = c_strings(envp);
  const std::string program =
      spec.program ? *spec.program : find_program(spec.argv[0], spec.env).value_or(spec.argv[0]);
  const char* workdir = spec.workdir ? spec.workdir->c_str() : nullptr;

  int out[2] = {-1, -1}, err[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {out[0], out[1], err[0], err[1]})
      if (fd >= 0) close(fd);
  };
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    int saved = errno;
    close_all();
    throw Error(ErrorKind::Runtime, fmt::format("cannot create pipes: {}", strerror(saved)));
  }

  pid_t pid = -1;
  int failure = 0;
  try {
    ChildSetup setup(out[1], err[1], workdir);
    if (spec.inherited_fd >= 0) setup.inherit(spec.inherited_fd, spec.inherited_fd_in_child);
    AffinityForSpawn pinned(spec.cpus);
    failure = posix_spawn(&pid, program.c_str(), setup.actions(), setup.attributes(),
                          c_argv.data(), c_envp.data());
  } catch (...) {
    close_all();
    throw;
  }
  close(out[1]);
  close(err[1]);
  if (failure != 0) {
    close(out[0]);
    close(err[0]);
    // posix_spawn gives an errno, not the step that failed: a directory that cannot be
    // entered is the likelier cause when there is one.
    // Else the command itself, found or refused as a shell would (127 and 126).
    if (workdir && !can_enter(workdir))
      throw Error(ErrorKind::Runtime, fmt::format("cannot enter '{}': {}", *spec.workdir, strerror(failure)));
    // A file that is there but names an interpreter that is not ("#!/usr/bin/python4") is
    // ENOENT too; a shell says "bad interpreter" and 126 for it.
    const bool there = access(program.c_str(), F_OK) == 0;
    ErrorKind kind = ErrorKind::Runtime;  // out of memory, processes or file descriptors
    if ((failure == ENOENT || failure == ENOTDIR) && !there) kind = ErrorKind::CommandNotFound;
    else if (failure == ENOENT || failure == EACCES || failure == ENOEXEC || failure == EISDIR ||
             failure == ETXTBSY || failure == EPERM)
      kind = ErrorKind::CommandNotExecutable;
    throw Error(kind, fmt::format("cannot execute '{}': {}", spec.argv[0],
                                  failure == ENOENT && there ? "its interpreter (#!) is not there"
                                                             : strerror(failure)));
  }
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  leaders_.insert(pid);
  return {pid, out[0], err[0]};
}

void PosixSpawner::signal_group(pid_t pgid, int signal) { kill(-pgid, signal); }

void PosixSpawner::signal_process(pid_t pid, int signal) { kill(pid, signal); }

std::optional<ProcStat> read_proc_stat(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text;
  if (!std::getline(in, text)) return std::nullopt;
  // The command name is in parentheses and may itself hold spaces and parentheses.
  auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(close + 1));
  ProcStat s;
  if (!(rest >> s.state >> s.ppid >> s.pgrp)) return std::nullopt;
  return s;
}

std::vector<ProcessExit> PosixSpawner::reap() {
  std::lock_guard hold(reaping_);
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
  for (pid_t pid : processes_below_this_one()) {
    auto stat = read_proc_stat(pid);
    if (stat && stat->pgrp == pgid && stat->state != 'Z' && stat->state != 'X') out.push_back(pid);
  }
  return out;
}

std::vector<pid_t> PosixSpawner::escaped_job_processes(const std::vector<std::string>& markers,
                                                       const std::vector<pid_t>& except_groups) {
  std::vector<pid_t> out;
  for (pid_t pid : processes_below_this_one()) {
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
