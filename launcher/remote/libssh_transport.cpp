// The only file that sees libssh.
#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "launcher/remote/ssh_transport.h"
#include "probes/socket_io.h"

namespace muster {

namespace {

std::string expand_home(const std::string& path) {
  if (path.rfind("~/", 0) != 0) return path;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + path.substr(1);
}

// libssh would otherwise ask on the terminal for a key's passphrase: muster never prompts.
int refuse_prompt(const char*, char*, size_t, int, int, void*) { return -1; }

class LibsshCommand : public RemoteCommand {
 public:
  LibsshCommand(ssh_session session, ssh_channel channel, std::string host)
      : session_(session), channel_(channel), host_(std::move(host)) {
    // sshd reports a command killed by a signal with an exit-signal message and no status;
    // libssh keeps only the status, so the signal is caught here (0 for a name it is not).
    callbacks_.userdata = this;
    callbacks_.channel_exit_signal_function = [](ssh_session, ssh_channel, const char* signal, int,
                                                 const char*, const char*, void* self) {
      static_cast<LibsshCommand*>(self)->exit_signal_ = signal ? signal_number(signal) : 0;
    };
    ssh_callbacks_init(&callbacks_);
    ssh_set_channel_callbacks(channel_, &callbacks_);
  }
  ~LibsshCommand() override {
    ssh_channel_close(channel_);
    ssh_channel_free(channel_);
  }

  void write(std::string_view bytes) override {
    while (!bytes.empty()) {
      int n = ssh_channel_write(channel_, bytes.data(), uint32_t(std::min<size_t>(bytes.size(), 32768)));
      if (n <= 0) throw SshError(SshFailure::Connection, host_, ssh_get_error(session_));
      bytes.remove_prefix(size_t(n));
    }
  }

  void close_stdin() override { ssh_channel_send_eof(channel_); }

  bool read(std::string& out, std::string& err, std::chrono::milliseconds limit) override {
    char buffer[32768];
    bool got = false;
    for (int stream = 0; stream < 2; ++stream) {
      // Wait only on stdout; stderr is drained without waiting.
      int wait = stream == 0 ? int(limit.count()) : 0;
      int n = ssh_channel_read_timeout(channel_, buffer, sizeof buffer, stream, wait);
      for (size_t taken = 0; n > 0;) {
        (stream == 0 ? out : err).append(buffer, size_t(n));
        got = true;
        taken += size_t(n);
        if (taken >= kMaxReadPerCall) break;  // the rest waits for the next call
        n = ssh_channel_read_timeout(channel_, buffer, sizeof buffer, stream, 0);
      }
      if (n == SSH_ERROR) return false;
    }
    // Draining stderr may have taken a stdout packet off the socket into libssh's buffer,
    // where a poll(2) on the socket never sees it: it is taken now, not at the next heartbeat.
    for (size_t taken = 0; taken < kMaxReadPerCall;) {
      const int n = ssh_channel_read_nonblocking(channel_, buffer, sizeof buffer, 0);
      if (n == SSH_ERROR) return false;
      if (n <= 0) break;
      out.append(buffer, size_t(n));
      got = true;
      taken += size_t(n);
    }
    if (got) return true;
    return !(ssh_channel_is_eof(channel_) || ssh_channel_is_closed(channel_));
  }

  int wait_fd() const override { return ssh_get_fd(session_); }

  std::optional<ExitStatus> exit_status() override {
    auto known = [this]() -> std::optional<ExitStatus> {
      if (int status = ssh_channel_get_exit_status(channel_); status != -1) return ExitStatus::exited(status);
      if (exit_signal_) return ExitStatus::signaled(exit_signal_);
      return std::nullopt;
    };
    // Wait briefly for the exit-status or exit-signal message, which may follow the output.
    for (int i = 0; i < 50; ++i) {
      if (auto ending = known()) return ending;
      if (ssh_channel_is_closed(channel_)) break;
      char ignored[256];
      ssh_channel_read_timeout(channel_, ignored, sizeof ignored, 0, 20);
    }
    return known();
  }

 private:
  ssh_session session_;
  ssh_channel channel_;
  std::string host_;
  ssh_channel_callbacks_struct callbacks_{};
  int exit_signal_ = 0;
};

class LibsshConnection : public SshConnection {
 public:
  LibsshConnection(ssh_session session, std::string host, ConnectTimings timings)
      : session_(session), host_(std::move(host)), timings_(timings) {}
  ConnectTimings timings() const override { return timings_; }
  ~LibsshConnection() override {
    ssh_disconnect(session_);
    ssh_free(session_);
  }

  std::unique_ptr<RemoteCommand> start(const std::string& command_line) override {
    ssh_channel channel = ssh_channel_new(session_);
    if (!channel || ssh_channel_open_session(channel) != SSH_OK) {
      std::string why = ssh_get_error(session_);
      if (channel) ssh_channel_free(channel);
      throw SshError(SshFailure::RemoteCommand, host_, "cannot start a command: " + why);
    }
    // Made before the command runs, so that its callbacks see even one that ends at once.
    auto command = std::make_unique<LibsshCommand>(session_, channel, host_);
    if (ssh_channel_request_exec(channel, command_line.c_str()) != SSH_OK)
      throw SshError(SshFailure::RemoteCommand, host_,
                     std::string("cannot start a command: ") + ssh_get_error(session_));
    return command;
  }

 private:
  ssh_session session_;
  std::string host_;
  ConnectTimings timings_;
};

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

class LibsshTransport : public SshTransport {
 public:
  std::unique_ptr<SshConnection> connect(const SshTarget& target) override {
    ssh_session session = ssh_new();
    if (!session) throw SshError(SshFailure::Connection, target.host, "libssh could not start");
    ConnectTimings timings;
    try {
      configure(session, target);
      open(session, target, timings);
      auto ssh_start = Clock::now();
      if (ssh_connect(session) != SSH_OK) {
        std::string why = ssh_get_error(session);
        SshFailure failure = why.find("imeout") != std::string::npos ? SshFailure::Timeout
                                                                     : SshFailure::Connection;
        throw SshError(failure, target.host, why);
      }
      check_host_key(session, target);
      authenticate(session, target);
      timings.ssh_ms = ms_since(ssh_start);
      keep_alive(session);
    } catch (...) {
      ssh_disconnect(session);
      ssh_free(session);
      throw;
    }
    return std::make_unique<LibsshConnection>(session, target.host, timings);
  }

 private:
  static void configure(ssh_session session, const SshTarget& target) {
    // ~/.ssh/config first (matched on the node's address as the user would type it);
    // then the cluster file's settings, which win.
    ssh_options_set(session, SSH_OPTIONS_HOST, target.address.c_str());
    ssh_options_parse_config(session, nullptr);
    const SshOptions& o = target.options;
    if (o.user) ssh_options_set(session, SSH_OPTIONS_USER, o.user->c_str());
    if (o.port) {
      unsigned port = unsigned(*o.port);
      ssh_options_set(session, SSH_OPTIONS_PORT, &port);
    }
    if (o.identity) ssh_options_set(session, SSH_OPTIONS_ADD_IDENTITY, expand_home(*o.identity).c_str());
    std::string known_hosts = expand_home(o.known_hosts.value_or("~/.ssh/known_hosts"));
    ssh_options_set(session, SSH_OPTIONS_KNOWNHOSTS, known_hosts.c_str());
    // Only our own check decides (check_host_key); the global file is not consulted.
    ssh_options_set(session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null");
    long timeout = long(o.connect_timeout_s.value_or(10.0));
    ssh_options_set(session, SSH_OPTIONS_TIMEOUT, &timeout);
    int yes = 1, no = 0;
    ssh_options_set(session, SSH_OPTIONS_NODELAY, &yes);
    ssh_options_set(session, SSH_OPTIONS_PASSWORD_AUTH, &no);
    ssh_options_set(session, SSH_OPTIONS_KBDINT_AUTH, &no);
    ssh_options_set(session, SSH_OPTIONS_GSSAPI_AUTH, &no);
    static ssh_callbacks_struct callbacks = [] {
      ssh_callbacks_struct c{};
      c.auth_function = refuse_prompt;
      ssh_callbacks_init(&c);
      return c;
    }();
    ssh_set_callbacks(session, &callbacks);
  }

  // Resolves and connects the TCP socket ourselves, timing each step, then hands the
  // socket to libssh.
  static void open(ssh_session session, const SshTarget& target, ConnectTimings& timings) {
    char* host = nullptr;
    ssh_options_get(session, SSH_OPTIONS_HOST, &host);  // after ~/.ssh/config's HostName
    std::string address = host ? host : target.address;
    ssh_string_free_char(host);
    unsigned port = 22;
    ssh_options_get_port(session, &port);
    long timeout_ms = long(target.options.connect_timeout_s.value_or(10.0) * 1000);

    auto start = Clock::now();
    addrinfo hints{}, *found = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (rc != 0)
      throw SshError(SshFailure::NameResolution, target.host,
                     fmt::format("cannot resolve '{}': {}", address, gai_strerror(rc)));
    timings.resolve_ms = ms_since(start);

    start = Clock::now();
    int fd = -1;
    std::string why;
    SshFailure failure = SshFailure::Connection;
    for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
      const TcpConnection connection =
          connect_before(a->ai_addr, a->ai_addrlen, Clock::now() + std::chrono::milliseconds(timeout_ms));
      fd = connection.fd;
      if (connection.error == ETIMEDOUT) {
        why = fmt::format("no answer from {} port {} within {:g} s", address, port,
                          double(timeout_ms) / 1000);
        failure = SshFailure::Timeout;
      } else if (connection.error != 0) {
        failure = connection.error == ECONNREFUSED ? SshFailure::ConnectionRefused : SshFailure::Connection;
        why = fmt::format("{} port {}: {}", address, port, std::strerror(connection.error));
      }
    }
    freeaddrinfo(found);
    if (fd < 0) throw SshError(failure, target.host, why);
    timings.tcp_connect_ms = ms_since(start);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    socket_t handed = fd;
    ssh_options_set(session, SSH_OPTIONS_FD, &handed);
  }

  static void check_host_key(ssh_session session, const SshTarget& target) {
    ssh_key key = nullptr;
    if (ssh_get_server_publickey(session, &key) != SSH_OK)
      throw SshError(SshFailure::HostKey, target.host, "the server sent no host key");
    unsigned char* hash = nullptr;
    size_t hash_len = 0;
    ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hash_len);
    char* fingerprint = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hash_len);
    std::string fp = fingerprint ? fingerprint : "?";
    std::string type = ssh_key_type_to_char(ssh_key_type(key));
    ssh_string_free_char(fingerprint);
    ssh_clean_pubkey_hash(&hash);
    ssh_key_free(key);

    const std::string known = expand_home(target.options.known_hosts.value_or("~/.ssh/known_hosts"));
    unsigned port = unsigned(target.options.port.value_or(22));
    std::string keyscan = fmt::format("ssh-keyscan -t {} {}{} >> {}", type,
                                      port == 22 ? "" : fmt::format("-p {} ", port),
                                      target.address, known);
    const bool accept_new = target.options.host_keys == HostKeyPolicy::AcceptNew;
    switch (ssh_session_is_known_server(session)) {
      case SSH_KNOWN_HOSTS_OK: return;
      case SSH_KNOWN_HOSTS_CHANGED:
      case SSH_KNOWN_HOSTS_OTHER:
        throw SshError(SshFailure::HostKey, target.host,
                       fmt::format("the host key CHANGED: the server offers {} {}, which does not "
                                   "match {}; this may be an attack. If the machine was "
                                   "reinstalled, remove the old key with 'ssh-keygen -R {} -f {}' "
                                   "and accept the new one",
                                   type, fp, known, target.address, known));
      case SSH_KNOWN_HOSTS_UNKNOWN:
      case SSH_KNOWN_HOSTS_NOT_FOUND:
        if (accept_new) {
          if (ssh_session_update_known_hosts(session) != SSH_OK)
            throw SshError(SshFailure::HostKey, target.host,
                           fmt::format("cannot record {} {} in {}: {}", type, fp, known,
                                       ssh_get_error(session)));
          return;
        }
        throw SshError(SshFailure::HostKey, target.host,
                       fmt::format("unknown host key {} {} (not in {}); check the fingerprint, "
                                   "then accept it with '{}', or set 'ssh: {{host_keys: "
                                   "accept-new}}' in the cluster file",
                                   type, fp, known, keyscan));
      case SSH_KNOWN_HOSTS_ERROR:
        throw SshError(SshFailure::HostKey, target.host,
                       fmt::format("cannot check the host key against {}: {}", known,
                                   ssh_get_error(session)));
    }
  }

  static void authenticate(ssh_session session, const SshTarget& target) {
    ssh_userauth_none(session, nullptr);  // required before asking which methods exist
    if (ssh_userauth_publickey_auto(session, nullptr, nullptr) == SSH_AUTH_SUCCESS) return;
    char* user = nullptr;
    ssh_options_get(session, SSH_OPTIONS_USER, &user);
    std::string who = user ? user : "?";
    ssh_string_free_char(user);
    throw SshError(SshFailure::Authentication, target.host,
                   fmt::format("no key was accepted for user '{}' (tried ssh-agent and {}); add "
                               "the public key to the node's authorized_keys or set "
                               "ssh.identity", who,
                               target.options.identity ? *target.options.identity
                                                       : std::string("~/.ssh/id_*")));
  }

  // libssh has no keepalive of its own; TCP keepalive notices a dead peer within a minute.
  static void keep_alive(ssh_session session) {
    int fd = ssh_get_fd(session);
    if (fd < 0) return;
    int yes = 1, idle = 15, interval = 5, count = 3;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &yes, sizeof yes);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  }
};

}  // namespace

std::unique_ptr<SshTransport> make_libssh_transport() {
  static std::once_flag once;
  std::call_once(once, [] { ssh_init(); });
  return std::make_unique<LibsshTransport>();
}

std::string describe_ending(const std::optional<ExitStatus>& ending) {
  if (!ending) return "no exit status: the connection dropped";
  return ending->kind == ExitStatus::Kind::Exited ? fmt::format("exit status {}", ending->code)
                                                  : ending->describe();
}

}  // namespace muster
