// Where a running rank is: the stacks of its threads, read while it is held still, as
// eu-stack and py-spy dump read them. The caller must be allowed to ptrace the rank (its
// agent is: the ranks are its descendants, which Yama's scope 1 permits).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace muster {

// Bounds on what one capture reads and keeps, whatever the rank holds.
inline constexpr size_t kMaxStackThreads = 64;     // threads of one rank
inline constexpr size_t kMaxStackFrames = 64;      // native frames of one thread
inline constexpr size_t kMaxPythonFrames = 64;     // Python frames of one thread
inline constexpr size_t kMaxFrameText = 160;       // bytes of one frame's text, cut between characters

// The library stacks are read with, opened at the first read (not linked, so that no start
// pays for it) and carried by the bundle under this name.
inline constexpr const char* kLibdwSoname = "libdw.so.1";

// One thread's call path, outermost frame first. A Python thread's path is its Python frames
// ("name (file:line)") followed by the native frames it was in below the interpreter (a C
// function it called: time.sleep's clock_nanosleep, a collective's wait).
struct ThreadStack {
  pid_t tid = 0;
  std::vector<std::string> frames;  // outermost first
};

// One process's threads, or why it has none.
struct ProcessStacks {
  enum class State { Captured, Gone, Failed };
  State state = State::Captured;
  std::string note;  // Gone or Failed: why; Captured: what could not be read (threads, Python frames)
  std::vector<ThreadStack> threads;  // the main thread first
  double held_ms = 0;  // how long it was held still: from the first thread seized to the last let go
};

// Reads `pid`'s modules (their ELF files and call frame information, and CPython's
// _PyRuntime) while it runs; then holds it and its threads still (PTRACE_SEIZE,
// PTRACE_INTERRUPT), waits for them to stop until `limit` after the call began (at least
// 20 ms more when reading the modules took longer), unwinds each stopped thread's return
// addresses with libdw and, for CPython 3.11, reads its Python frames from its memory, and
// lets it go on. So `limit` bounds the wait for the stops, not the hold: that is the wait
// plus the reads of its memory, milliseconds (more for deep Python stacks), as the modules'
// files were read before and the addresses are named after it runs again. A thread that did
// not stop in time is named in a note. The process is not otherwise changed: a signal that
// arrived while it was held is delivered when it is released. Waits only on `pid`'s
// threads, never reaps it. With `parent`, a process that is not its child is Gone: the
// caller's child ended and was reaped, and its number may be another process's now.
ProcessStacks capture_process_stacks(pid_t pid, std::chrono::milliseconds limit,
                                     std::optional<pid_t> parent = std::nullopt);

}  // namespace muster
