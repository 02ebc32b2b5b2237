// An SshTransport that reaches nothing: each host follows a script, and every connection
// and command is recorded, with the most handshakes seen at once.
#pragma once

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include "launcher/remote/ssh_transport.h"

namespace muster::testing {

struct FakeHost {
  std::chrono::milliseconds handshake{0};   // how long connect() takes
  std::optional<SshFailure> refuse;          // connect() fails this way
  std::string stdout_text;                   // what any command prints
  int exit_status = 0;                       // -1: the connection drops before any status
  int exit_signal = 0;                       // set: the command was killed by this signal
};

class FakeSshTransport : public SshTransport {
 public:
  std::map<std::string, FakeHost> hosts;      // by address
  std::vector<std::string> commands;          // "HOST: COMMAND LINE", in start order
  std::vector<std::string> finished_connects; // addresses, in the order handshakes ended
  int most_at_once = 0;

  std::unique_ptr<SshConnection> connect(const SshTarget& target) override {
    const FakeHost& host = hosts.at(target.address);
    {
      std::lock_guard lock(mutex_);
      most_at_once = std::max(most_at_once, ++in_handshake_);
    }
    std::this_thread::sleep_for(host.handshake);
    {
      std::lock_guard lock(mutex_);
      --in_handshake_;
      finished_connects.push_back(target.address);
    }
    if (host.refuse) throw SshError(*host.refuse, target.host, "scripted failure");
    return std::make_unique<Connection>(*this, target.host, host);
  }

 private:
  class Command : public RemoteCommand {
   public:
    explicit Command(const FakeHost& host) : host_(host) {}
    void write(std::string_view) override {}
    void close_stdin() override {}
    bool read(std::string& out, std::string&, std::chrono::milliseconds) override {
      if (done_) return false;
      out += host_.stdout_text;
      done_ = true;
      return true;
    }
    std::optional<ExitStatus> exit_status() override {
      if (host_.exit_signal) return ExitStatus::signaled(host_.exit_signal);
      if (host_.exit_status < 0) return std::nullopt;
      return ExitStatus::exited(host_.exit_status);
    }

   private:
    const FakeHost& host_;
    bool done_ = false;
  };

  class Connection : public SshConnection {
   public:
    Connection(FakeSshTransport& owner, std::string host, const FakeHost& script)
        : owner_(owner), host_(std::move(host)), script_(script) {}
    std::unique_ptr<RemoteCommand> start(const std::string& command_line) override {
      std::lock_guard lock(owner_.mutex_);
      owner_.commands.push_back(host_ + ": " + command_line);
      return std::make_unique<Command>(script_);
    }

   private:
    FakeSshTransport& owner_;
    std::string host_;
    const FakeHost& script_;
  };

  std::mutex mutex_;
  int in_handshake_ = 0;
};

}  // namespace muster::testing
