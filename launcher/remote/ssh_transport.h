// Reaching other machines: the SSH transport behind a small interface, so that fan-out and
// launch logic can be tested against a recording fake and run for real through libssh.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "launcher/cluster/cluster_spec.h"
#include "launcher/error.h"
#include "launcher/local/exit_status.h"

namespace muster {

// Why a node could not be reached or used; each is reported with the node's name.
enum class SshFailure {
  NameResolution,
  ConnectionRefused,
  Timeout,
  Authentication,
  HostKey,
  RemoteCommand,
  Connection,  // anything else on the way (reset, protocol error)
};

// "name resolution", "connection refused", ...
// Here rather than beside libssh, so that the node binary, which reports SSH failures but
// never makes a connection, does not load libssh.
inline const char* describe(SshFailure failure) {
  switch (failure) {
    case SshFailure::NameResolution: return "name resolution";
    case SshFailure::ConnectionRefused: return "connection refused";
    case SshFailure::Timeout: return "timeout";
    case SshFailure::Authentication: return "authentication";
    case SshFailure::HostKey: return "host key";
    case SshFailure::RemoteCommand: return "remote command";
    case SshFailure::Connection: return "connection";
  }
  return "ssh";
}

// An SSH failure of one node; what() is "HOST: cause: detail[, fix]".
class SshError : public Error {
 public:
  SshError(SshFailure failure, const std::string& host, const std::string& detail)
      : Error(ErrorKind::Runtime, host + ": " + describe(failure) + ": " + detail),
        failure_(failure), host_(host) {}
  SshFailure failure() const { return failure_; }
  const std::string& host() const { return host_; }

 private:
  SshFailure failure_;
  std::string host_;
};

// What to connect to.
struct SshTarget {
  std::string host;     // the node's name, for messages and ~/.ssh/config's Host matching
  std::string address;  // where to connect
  SshOptions options;   // from the cluster file; unset fields come from ~/.ssh/config
};

// What one RemoteCommand::read appends at most, per stream: a node that floods its output
// is read in pieces its reader can bound, never all at once.
inline constexpr size_t kMaxReadPerCall = size_t(1) << 20;

// How much of a node's stderr muster keeps to quote in a message (its first words while it
// starts, its last ones once it runs): enough for any error, and no more however much comes.
inline constexpr size_t kKeptStderr = 4096;

// A command running on a node. Not thread-safe: one thread drives it.
class RemoteCommand {
 public:
  virtual ~RemoteCommand() = default;
  // Sends bytes to the command's stdin.
  virtual void write(std::string_view bytes) = 0;
  // Closes the command's stdin (it sees end of file).
  virtual void close_stdin() = 0;
  // Waits up to `limit` for output; appends what came, at most kMaxReadPerCall bytes of
  // each stream (call again for more). Returns false once both streams have ended.
  virtual bool read(std::string& out, std::string& err, std::chrono::milliseconds limit) = 0;
  // How the command ended, once it has: its exit code or the signal that killed it;
  // nullopt when the connection dropped first.
  virtual std::optional<ExitStatus> exit_status() = 0;
  // A descriptor that becomes readable when output may have arrived, for a poll(2) that
  // also waits on other things; -1 when there is none (then read() with a short limit).
  virtual int wait_fd() const { return -1; }
};

// How long each step of reaching a node took, in milliseconds.
struct ConnectTimings {
  double resolve_ms = 0;      // name resolution
  double tcp_connect_ms = 0;  // the TCP handshake
  double ssh_ms = 0;          // SSH key exchange, host key check and authentication
};

// An authenticated connection to one node. Not thread-safe: one thread drives it.
class SshConnection {
 public:
  virtual ~SshConnection() = default;
  // How long reaching the node took.
  virtual ConnectTimings timings() const { return {}; }
  // Starts `command_line` through the remote user's shell.
  virtual std::unique_ptr<RemoteCommand> start(const std::string& command_line) = 0;
};

// Opens connections. Implementations may be called from several threads at once.
class SshTransport {
 public:
  virtual ~SshTransport() = default;
  // Resolves, connects, checks the host key and authenticates, never prompting.
  // Throws SshError naming the cause.
  virtual std::unique_ptr<SshConnection> connect(const SshTarget& target) = 0;
};

// The real transport: libssh in-process.
std::unique_ptr<SshTransport> make_libssh_transport();

// How a command ended, in words: "exit status 3", "was killed by SIGKILL (signal 9)", or
// "no exit status: the connection dropped".
std::string describe_ending(const std::optional<ExitStatus>& ending);

}  // namespace muster
