// A CPython 3.11 process's Python frames, read from its memory as py-spy dump reads them:
// from _PyRuntime to each thread state and its chain of _PyInterpreterFrame. Nothing in the
// process is called or changed; the caller holds it still while this reads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace muster {

// Copies `size` bytes at `address` of the process into `out`; false when they cannot be read.
using ReadProcessMemory = std::function<bool(uint64_t address, void* out, size_t size)>;

// One Python thread: its native thread id and its frames, outermost first, as
// "function (file:line)".
struct PythonThread {
  uint64_t native_tid = 0;
  std::vector<std::string> frames;
};

// The Python threads of the process whose _PyRuntime lies at `runtime_address`, at most
// `max_threads` of at most `max_frames` frames each. Throws Error(Runtime) saying what could
// not be read when the memory there is not a CPython 3.11 runtime's.
std::vector<PythonThread> read_python_threads(uint64_t runtime_address, const ReadProcessMemory& read,
                                              size_t max_threads, size_t max_frames);

// The line CPython 3.11 gives the instruction at code unit `instruction` of a code object
// whose co_linetable is `linetable` and co_firstlineno `first_line` (PEP 626's location
// table, as PyCode_Addr2Line reads it); -1 when the table has no line for it.
int python311_line(std::string_view linetable, int first_line, int instruction);

}  // namespace muster
