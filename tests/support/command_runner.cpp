#include "tests/support/build_paths.h"
#include "tests/support/command_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

extern char** environ;

namespace muster::testing {
namespace {

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

}  // namespace

std::vector<std::string> CommandResult::out_lines() const { return split_lines(out); }
std::vector<std::string> CommandResult::err_lines() const { return split_lines(err); }

RunningCommand::RunningCommand(const std::vector<std::string>& argv,
                               const std::vector<std::string>& extra_env) {
  // A variable the test gives replaces the one inherited (ctest's ENVIRONMENT among them):
  // getenv reads the first of two entries of one name, which would be the inherited one.
  const auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  std::set<std::string> given;
  for (const auto& e : extra_env) given.insert(name_of(e));
  std::vector<std::string> env;
  for (char** p = environ; *p; ++p)
    if (!given.count(name_of(*p))) env.emplace_back(*p);
  for (const auto& e : extra_env) env.push_back(e);
  std::vector<char*> c_argv, c_env;
  for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  for (const auto& e : env) c_env.push_back(const_cast<char*>(e.c_str()));
  c_env.push_back(nullptr);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    execvpe(c_argv[0], c_argv.data(), c_env.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
}

RunningCommand::~RunningCommand() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
  if (err_fd_ >= 0) close(err_fd_);
}

void RunningCommand::signal(int sig) { kill(pid_, sig); }

std::string RunningCommand::read_out_until(const std::string& text, std::chrono::seconds limit) {
  return read_until(false, text, limit);
}

std::string RunningCommand::read_err_until(const std::string& text, std::chrono::seconds limit) {
  return read_until(true, text, limit);
}

std::string& RunningCommand::read_until(bool from_err, const std::string& text, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::string& wanted = from_err ? err_read_early_ : out_read_early_;
  const int& wanted_fd = from_err ? err_fd_ : out_fd_;
  while (wanted_fd >= 0 && (text.empty() || wanted.find(text) == std::string::npos)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    read_ready(left);
  }
  return wanted;
}

void RunningCommand::read_ready(std::chrono::milliseconds limit) {
  pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
  if (poll(fds, 2, int(std::min<long>(limit.count(), 1000))) <= 0) return;
  char buffer[65536];
  for (int i = 0; i < 2; ++i) {
    int& fd = i == 0 ? out_fd_ : err_fd_;
    if (fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) {
      close(fd);
      fd = -1;
    } else {
      (i == 0 ? out_read_early_ : err_read_early_).append(buffer, size_t(n));
    }
  }
}

CommandResult RunningCommand::wait(std::chrono::seconds limit) {
  CommandResult result;
  auto deadline = std::chrono::steady_clock::now() + limit;
  bool killed = false;
  while (out_fd_ >= 0 || err_fd_ >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      if (!killed) {
        kill(pid_, SIGKILL);
        killed = true;
      }
      left = std::chrono::milliseconds(2000);
      deadline = std::chrono::steady_clock::now() + left;
    }
    read_ready(left);
  }
  result.out = std::move(out_read_early_);
  result.err = std::move(err_read_early_);
  if (killed) result.err += "\n[test harness: command ran past its limit and was killed]\n";
  int status = 0;
  rusage usage{};
  wait4(pid_, &status, 0, &usage);
  reaped_ = true;
  result.exit_code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  result.max_rss_kib = usage.ru_maxrss;
  return result;
}

CommandResult run_command(const std::vector<std::string>& argv,
                          const std::vector<std::string>& extra_env, std::chrono::seconds limit) {
  return RunningCommand(argv, extra_env).wait(limit);
}

CommandResult run_muster(const std::vector<std::string>& args,
                         const std::vector<std::string>& extra_env) {
  std::vector<std::string> argv = {muster_binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, extra_env);
}

bool process_alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(in, text)) return false;
  auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

std::string process_file(pid_t pid, const std::string& name) {
  const int fd = open(("/proc/" + std::to_string(pid) + "/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) text.clear();  // gone mid-read: what was read is not the whole file
    if (n <= 0) break;
    text.append(buffer, size_t(n));
  }
  close(fd);
  return text;
}

std::vector<pid_t> processes_running(const std::vector<std::string>& words,
                                     const std::string& environment_entry) {
  std::string wanted;
  for (const auto& w : words) wanted += w + '\0';
  const std::string entry = '\0' + environment_entry + '\0';
  std::vector<pid_t> out;
  for (const auto& dir : std::filesystem::directory_iterator("/proc")) {
    const std::string name = dir.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = pid_t(std::stol(name));
    if (process_file(pid, "cmdline").rfind(wanted, 0) != 0) continue;
    if (!environment_entry.empty() &&
        ('\0' + process_file(pid, "environ")).find(entry) == std::string::npos)
      continue;
    if (process_alive(pid)) out.push_back(pid);
  }
  return out;
}

NamedDirectory::NamedDirectory(const std::string& text, const std::string& said) {
  const size_t at = text.find(said);
  if (at == std::string::npos) return;
  const size_t from = at + said.size();
  const size_t end = text.find('\n', from);
  path_ = text.substr(from, (end == std::string::npos ? text.size() : end) - from);
}

NamedDirectory::~NamedDirectory() {
  std::error_code ignored;
  if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
}

TempDir::TempDir() {
  char pattern[] = "/tmp/muster-test-XXXXXX";
  if (!mkdtemp(pattern)) throw std::runtime_error("mkdtemp");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

void TempDir::write(const std::string& name, const std::string& text) const {
  std::ofstream(file(name)) << text;
}

std::string TempDir::read(const std::string& name) const {
  std::ifstream in(file(name));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool wait_until(const std::function<bool()>& ready, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return ready();
}

bool in_ci() {
  const char* ci = std::getenv("MUSTER_CI");
  return ci && std::string(ci) == "1";
}

std::string once_all_pids_written(const std::string& dir, int count) {
  return fmt::format("n=0; while [ $(ls '{}' | grep -c '^pid[.]') -lt {} ] && [ $n -lt 300 ]; do "
                     "sleep 0.1; n=$((n+1)); done; ", dir, count);
}

}  // namespace muster::testing
