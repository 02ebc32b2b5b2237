// How one process ended.
#pragma once

#include <string>
#include <string_view>

namespace muster {

// A process's end: an exit code or the signal that killed it.
struct ExitStatus {
  enum class Kind { Exited, Signaled };
  Kind kind = Kind::Exited;
  int code = 0;    // exit code when Exited
  int signal = 0;  // signal number when Signaled

  static ExitStatus exited(int code) { return {Kind::Exited, code, 0}; }
  static ExitStatus signaled(int signal) { return {Kind::Signaled, 0, signal}; }
  // Decodes a waitpid() status word.
  static ExitStatus from_wait_status(int status);

  bool success() const { return kind == Kind::Exited && code == 0; }
  // The shell's number for it: the code, or 128+N for signal N.
  int shell_code() const { return kind == Kind::Exited ? code : 128 + signal; }
  // "exited with status 3" / "was killed by SIGKILL (signal 9)".
  std::string describe() const;
  bool operator==(const ExitStatus&) const = default;
};

// The number of the signal sigabbrev_np names `abbrev` ("SEGV" -> 11, as sshd names signals
// too); 0 for a name that is none.
int signal_number(std::string_view abbrev);

}  // namespace muster
