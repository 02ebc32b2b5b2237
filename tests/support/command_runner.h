// Running the real muster binary (and peer tools) from tests, with output captured.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace muster::testing {

// How a command ended and what it printed.
struct CommandResult {
  int exit_code = -1;  // 128+N when killed by signal N
  long max_rss_kib = 0; // the largest resident set of the command and what it waited for
  std::string out;
  std::string err;
  std::vector<std::string> out_lines() const;
  std::vector<std::string> err_lines() const;
};

// A command started in the background; its output is collected while waiting.
class RunningCommand {
 public:
  explicit RunningCommand(const std::vector<std::string>& argv,
                          const std::vector<std::string>& extra_env = {});
  ~RunningCommand();
  pid_t pid() const { return pid_; }
  void signal(int sig);
  // Reads the command's stdout until `text` appears in it, it closes or `limit` passes; what
  // was read is returned and is also the start of wait()'s out.
  std::string read_out_until(const std::string& text, std::chrono::seconds limit);
  // The same for stderr (stdout read meanwhile, so that neither pipe fills). An empty `text`
  // reads until `limit` or the end.
  std::string read_err_until(const std::string& text, std::chrono::seconds limit);
  // Waits at most `limit`, then kills the command (and says so in err).
  CommandResult wait(std::chrono::seconds limit = std::chrono::seconds(180));

 private:
  // Reads both streams until `text` is in the one named (false: stdout, true: stderr).
  std::string& read_until(bool from_err, const std::string& text, std::chrono::seconds limit);
  // One poll of both streams (at most `limit`, a second at most): what is ready is appended.
  void read_ready(std::chrono::milliseconds limit);

  std::string out_read_early_, err_read_early_;
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  bool reaped_ = false;
};

// Runs a command to completion.
CommandResult run_command(const std::vector<std::string>& argv,
                          const std::vector<std::string>& extra_env = {},
                          std::chrono::seconds limit = std::chrono::seconds(180));

// `build/muster ARGS...` to completion.
CommandResult run_muster(const std::vector<std::string>& args,
                         const std::vector<std::string>& extra_env = {});

// A file under /proc/PID/ ("cmdline", "environ", "stat"), empty when the process has gone.
// Reading a process that exits mid-read fails with ESRCH, which an istreambuf_iterator turns
// into an exception: a test scanning /proc while other tests' processes come and go must not
// fail for that.
std::string process_file(pid_t pid, const std::string& name);

// True when a process with this pid exists and is not a zombie.
bool process_alive(pid_t pid);

// The live processes whose command line starts with these words ("muster", "smoke-rank") and,
// when environment_entry is given, whose environment holds it ("NAME=value"): ctest runs tests
// in parallel, so a test finds its own processes by a mark it gave them.
std::vector<pid_t> processes_running(const std::vector<std::string>& words,
                                     const std::string& environment_entry = {});

// A fresh directory under /tmp, removed with its contents when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  void write(const std::string& name, const std::string& text) const;
  std::string read(const std::string& name) const;

 private:
  std::string path_;
};

// A directory muster wrote where the test could not choose (beside the head, for a job) and
// named in its words: the rest of the line after `said` in `text`. Removed with its contents
// when the object goes away; empty when `said` is not in `text`.
class NamedDirectory {
 public:
  NamedDirectory(const std::string& text, const std::string& said);
  ~NamedDirectory();
  NamedDirectory(const NamedDirectory&) = delete;
  NamedDirectory& operator=(const NamedDirectory&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A shell snippet (ending in "; ") for a rank that must not act before every rank started:
// it waits, at most 30 s, until `dir` holds `count` files named pid.*. A rank that fails at
// once could otherwise end the job before a starved sibling wrote its pid.
std::string once_all_pids_written(const std::string& dir, int count);

// Waits up to `limit` for `ready()` to become true, polling.
bool wait_until(const std::function<bool()>& ready,
                std::chrono::milliseconds limit = std::chrono::milliseconds(20000));

// True in CI (MUSTER_CI=1): tests that would skip for a missing tool must fail instead.
bool in_ci();

}  // namespace muster::testing
