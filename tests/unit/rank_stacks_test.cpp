// The capture against real processes of this machine: a C program asleep and a CPython 3.11
// script in a function of its own, read while they run, and running on afterwards.
#include "launcher/local/rank_stacks.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "launcher/local/python_frames.h"

namespace muster {
namespace {

// A child of this test (as a rank is its agent's), started with `argv`; once it printed a
// line it is where the test wants it.
struct Child {
  pid_t pid = -1;
  explicit Child(std::vector<std::string> argv) {
    int out[2];
    EXPECT_EQ(pipe(out), 0);
    pid = fork();
    if (pid == 0) {
      dup2(out[1], 1);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(out[1]);
    pollfd fd{out[0], POLLIN, 0};
    EXPECT_EQ(poll(&fd, 1, 20000), 1);
    close(out[0]);
  }
  ~Child() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  char state() const {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string all((std::istreambuf_iterator<char>(in)), {});
    return all[all.rfind(')') + 2];
  }
};

bool holds(const std::vector<std::string>& frames, const std::string& part) {
  return std::any_of(frames.begin(), frames.end(), [&](const std::string& f) { return f.find(part) != f.npos; });
}

TEST(RankStacks, ANativeProgramIsReadWhereItSleepsAndRunsOnAfterwards) {
  Child child({"/bin/sh", "-c", "echo ready; exec /bin/sleep 1000"});
  usleep(100000);  // the exec of sleep
  const ProcessStacks stacks = capture_process_stacks(child.pid, std::chrono::milliseconds(5000));
  ASSERT_EQ(stacks.state, ProcessStacks::State::Captured) << stacks.note;
  ASSERT_EQ(stacks.threads.size(), 1u);
  EXPECT_EQ(stacks.threads[0].tid, child.pid);
  EXPECT_TRUE(holds(stacks.threads[0].frames, "nanosleep")) << ::testing::PrintToString(stacks.threads[0].frames);
  // Held for the unwinding alone: its files were read before.
  EXPECT_GT(stacks.held_ms, 0.0);
  EXPECT_LT(stacks.held_ms, 1000.0);
  // Released: asleep again, not stopped under a tracer.
  usleep(50000);
  EXPECT_EQ(child.state(), 'S');
}

TEST(RankStacks, APythonProgramGivesItsFunctionsFilesAndLines) {
  const std::string script = ::testing::TempDir() + "/muster_waits_here.py";
  std::ofstream(script) << "import sys, time\n"
                           "def waits_here():\n"
                           "    print('ready', flush=True)\n"
                           "    time.sleep(1000)\n"
                           "waits_here()\n";
  Child child({"/usr/bin/python3", script});
  usleep(100000);
  const ProcessStacks stacks = capture_process_stacks(child.pid, std::chrono::milliseconds(5000));
  ASSERT_EQ(stacks.state, ProcessStacks::State::Captured) << stacks.note;
  ASSERT_FALSE(stacks.threads.empty());
  const auto& frames = stacks.threads[0].frames;
  EXPECT_EQ(stacks.note, "");
  ASSERT_GE(frames.size(), 3u) << ::testing::PrintToString(frames);
  EXPECT_EQ(frames[0], "<module> (" + script + ":5)");
  EXPECT_EQ(frames[1], "waits_here (" + script + ":4)");
  EXPECT_TRUE(frames.back().find("nanosleep") != std::string::npos) << ::testing::PrintToString(frames);
  usleep(50000);
  EXPECT_EQ(child.state(), 'S');
}

// A frame longer than muster keeps is cut where it is read, between characters, and keeps
// its file's end and its line.
TEST(RankStacks, ALongPythonFrameIsCutKeepingItsLine) {
  const std::string name = "waits_" + std::string(200, 'x') + "\u00e9";
  const std::string script = ::testing::TempDir() + "/muster_waits_long.py";
  std::ofstream(script) << "import sys, time\n"
                           "def " << name << "():\n"
                           "    print('ready', flush=True)\n"
                           "    time.sleep(1000)\n"
                        << name << "()\n";
  Child child({"/usr/bin/python3", script});
  usleep(100000);
  const ProcessStacks stacks = capture_process_stacks(child.pid, std::chrono::milliseconds(5000));
  ASSERT_EQ(stacks.state, ProcessStacks::State::Captured) << stacks.note;
  ASSERT_FALSE(stacks.threads.empty());
  const auto& frames = stacks.threads[0].frames;
  ASSERT_GE(frames.size(), 2u) << ::testing::PrintToString(frames);
  for (const auto& frame : frames) EXPECT_LE(frame.size(), kMaxFrameText) << frame;
  EXPECT_EQ(frames[1].rfind("waits_xxx", 0), 0u) << frames[1];
  const std::string tail = "muster_waits_long.py:4)";
  ASSERT_GE(frames[1].size(), tail.size());
  EXPECT_EQ(frames[1].substr(frames[1].size() - tail.size()), tail) << frames[1];
}

TEST(RankStacks, AProcessThatEndedIsGone) {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  EXPECT_EQ(capture_process_stacks(pid, std::chrono::milliseconds(1000)).state, ProcessStacks::State::Gone);
}

// Tables CPython 3.11 wrote for a function of four lines: short, one-line and no-column forms.
TEST(PythonLineTable, EachInstructionHasTheLineCPythonGivesIt) {
  // head byte: 1 CCCC LLL (code, length - 1)
  std::string table;
  table += char(0x80 | (10 << 3) | 0);  // one line, delta 0, 1 unit
  table += "\x01\x02";
  table += char(0x80 | (11 << 3) | 1);  // one line, delta 1, 2 units
  table += "\x01\x02";
  table += char(0x80 | (13 << 3) | 0);  // no columns, signed varint delta +2 (4)
  table += char(4);
  table += char(0x80 | (15 << 3) | 0);  // no location
  table += char(0x80 | (13 << 3) | 0);  // delta -1 (3)
  table += char(3);
  EXPECT_EQ(python311_line(table, 10, 0), 10);
  EXPECT_EQ(python311_line(table, 10, 1), 11);
  EXPECT_EQ(python311_line(table, 10, 2), 11);
  EXPECT_EQ(python311_line(table, 10, 3), 13);
  EXPECT_EQ(python311_line(table, 10, 4), -1);
  EXPECT_EQ(python311_line(table, 10, 5), 12);
  EXPECT_EQ(python311_line(table, 10, 6), -1);
}

}  // namespace
}  // namespace muster
