// The real spawner against the real kernel: what a started rank inherits and what it does
// not, and how a start that fails is named. The child reports on itself from /proc.
#include "launcher/local/posix_spawner.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "launcher/error.h"

namespace muster {
namespace {

// Runs `script` under /bin/sh through the spawner and returns what it printed on stdout.
std::string output_of(PosixSpawner& spawner, const std::string& script, ProcessSpec spec = {}) {
  spec.argv = {"/bin/sh", "-c", script};
  spec.env.set("PATH", "/usr/bin:/bin");
  SpawnedProcess p = spawner.spawn(spec);
  std::string out;
  char buffer[4096];
  for (;;) {
    pollfd fd{p.stdout_fd, POLLIN, 0};
    if (poll(&fd, 1, 10000) <= 0) break;  // a child that hangs fails the test, not the run
    ssize_t n = read(p.stdout_fd, buffer, sizeof buffer);
    if (n <= 0) break;
    out.append(buffer, size_t(n));
  }
  close(p.stdout_fd);
  close(p.stderr_fd);
  for (int tries = 0; tries < 1000; ++tries) {
    for (const auto& exit : spawner.reap())
      if (exit.pid == p.pid) return out;
    usleep(10000);
  }
  ADD_FAILURE() << "the child " << p.pid << " was not reaped";
  return out;
}

std::string start_error(PosixSpawner& spawner, ProcessSpec spec) {
  try {
    spawner.spawn(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "(started)";
}

int open_descriptors() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST(PosixSpawner, AChildLeadsItsOwnSessionAndReadsNothing) {
  PosixSpawner spawner;
  // Fields 5 and 6 of /proc/PID/stat are the process group and the session.
  std::string out = output_of(spawner,
                              "set -- $(cat /proc/$$/stat); echo \"$$ $5 $6\"; "
                              "readlink /proc/$$/fd/0");
  std::string pid = out.substr(0, out.find(' '));
  EXPECT_EQ(out, pid + " " + pid + " " + pid + "\n/dev/null\n");
}

TEST(PosixSpawner, AChildGetsItsCpusAndTheSpawningThreadKeepsItsOwn) {
  cpu_set_t before, after;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  PosixSpawner spawner;
  ProcessSpec spec;
  spec.cpus = {0};
  EXPECT_EQ(output_of(spawner, "grep Cpus_allowed_list /proc/$$/status", spec),
            "Cpus_allowed_list:\t0\n");
  ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&before, &after));
}

TEST(PosixSpawner, AChildHandlesSignalsByDefaultWhateverMusterDoes) {
  // muster ignores SIGPIPE and blocks signals it reads from a signalfd; a rank must not.
  sigset_t blocked, old_mask;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &blocked, &old_mask);
  auto old_pipe = signal(SIGPIPE, SIG_IGN);
  PosixSpawner spawner;
  // grep reads its own status: the shell's mask is not a witness, because dash blocks every
  // signal around each fork and wait, so reading the shell's mask from its child races.
  std::string out = output_of(spawner, "exec grep -E '^Sig(Blk|Ign)' /proc/self/status");
  signal(SIGPIPE, old_pipe);
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  // glibc's posix_spawn leaves its two reserved signals (32, 33: below SIGRTMIN, never sent
  // to another process) ignored in the child, as in every posix_spawn'd child of a threaded
  // program; a glibc program installs its own handlers for them. Every other signal is default.
  const auto newline = out.find('\n');
  ASSERT_NE(newline, std::string::npos) << out;
  EXPECT_EQ(out.substr(0, newline), "SigBlk:\t0000000000000000");
  const unsigned long long ignored = std::stoull(out.substr(out.find("SigIgn:\t") + 8), nullptr, 16);
  const unsigned long long reserved = (1ULL << (32 - 1)) | (1ULL << (33 - 1));
  EXPECT_EQ(ignored & ~reserved, 0ULL) << out;
}

TEST(PosixSpawner, AChildStartsInItsWorkdir) {
  PosixSpawner spawner;
  ProcessSpec spec;
  spec.workdir = "/proc";
  EXPECT_EQ(output_of(spawner, "pwd", spec), "/proc\n");
}

TEST(PosixSpawner, AStartThatFailsNamesItsCauseAndLeavesNothingOpen) {
  PosixSpawner spawner;
  const int descriptors = open_descriptors();
  ProcessSpec missing;
  missing.argv = {"no-such-program-for-muster"};
  missing.env.set("PATH", "/usr/bin:/bin");
  EXPECT_EQ(start_error(spawner, missing),
            "cannot execute 'no-such-program-for-muster': No such file or directory");

  ProcessSpec elsewhere;
  elsewhere.argv = {"/bin/true"};
  elsewhere.workdir = "/no/such/dir/for/muster";
  EXPECT_EQ(start_error(spawner, elsewhere),
            "cannot enter '/no/such/dir/for/muster': No such file or directory");

  ProcessSpec unbindable;
  unbindable.argv = {"/bin/true"};
  unbindable.cpus = {CPU_SETSIZE - 1};  // no machine this runs on has it
  EXPECT_EQ(start_error(spawner, unbindable), "cannot bind to its CPUs: Invalid argument");

  EXPECT_EQ(open_descriptors(), descriptors);
  EXPECT_TRUE(spawner.reap().empty());
}

}  // namespace
}  // namespace muster
