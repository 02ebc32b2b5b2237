// The one error type of muster's libraries; cli/ catches it once and picks the exit code.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace muster {

// What kind of failure an Error is: it decides the exit status (exit_status_of).
enum class ErrorKind {
  Usage,    // the command line is wrong
  Config,   // a cluster file, hostfile or host list is wrong
  Runtime,  // the world did not cooperate (a process, a socket, a file)
  Interrupted,  // muster was told to stop (SIGINT, SIGTERM, SIGHUP)
  Unreachable,  // a node could not be reached, so nothing was started there
  CommandNotFound,       // the command to run is not in the PATH, or its file does not exist
  CommandNotExecutable,  // the command's file exists but cannot be executed
};

// The exit status muster ends with for a failure of `kind`: 2 for usage and configuration,
// 255 for a node that cannot be reached (ssh's and pdsh's number), 127 and 126 for a command
// not found or not executable (a shell's), 1 for anything else at run time.
constexpr int exit_status_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Usage:
    case ErrorKind::Config: return 2;
    case ErrorKind::Unreachable: return 255;
    case ErrorKind::CommandNotFound: return 127;
    case ErrorKind::CommandNotExecutable: return 126;
    case ErrorKind::Runtime:
    case ErrorKind::Interrupted: return 1;
  }
  return 1;
}

// A failure with one or more messages, each already phrased as "subject: problem[, fix]".
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message)
      : std::runtime_error(message), kind_(kind), messages_{std::move(message)} {}
  Error(ErrorKind kind, std::vector<std::string> messages)
      : std::runtime_error(messages.empty() ? std::string("error") : messages.front()),
        kind_(kind), messages_(std::move(messages)) {}

  ErrorKind kind() const { return kind_; }
  // Every problem found, in the order found (validation reports all of them at once).
  const std::vector<std::string>& messages() const { return messages_; }

 private:
  ErrorKind kind_;
  std::vector<std::string> messages_;
};

// muster received a stop signal and ended what it was doing: `what` says what became of it
// ("before anything was started"). cli/ exits with 128 + the signal's number, as a shell would.
class Interrupted : public Error {
 public:
  explicit Interrupted(int signal, std::string what = "before anything was started")
      : Error(ErrorKind::Interrupted, std::move(what)), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

}  // namespace muster
