#include "launcher/remote/slurm_launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "launcher/cluster/environment.h"
#include "launcher/cluster/hostlist.h"
#include "launcher/error.h"
#include "launcher/local/exit_status.h"
#include "launcher/local/command_within.h"
#include "launcher/local/posix_spawner.h"
#include "launcher/local/self.h"
#include "launcher/remote/bundle.h"
#include "launcher/remote/shell_quote.h"
#include "launcher/thread.h"
#include "probes/digest.h"
#include "probes/interfaces.h"
#include "probes/job_server.h"
#include "probes/socket_io.h"

namespace muster {
namespace {

using Clock = SocketClock;
using Milliseconds = std::chrono::milliseconds;

// A node name is a host name: far shorter than this.
constexpr size_t kMaxNodeName = 256;
// srun's words are kept for messages; its last bytes are the ones that matter.
constexpr size_t kMaxSrunOutput = size_t(64) << 10;
// Handshakes in progress at once; a client that holds one open only holds its own slot.
constexpr size_t kMaxPendingHandshakes = 64;
// How long a caller has to prove it holds the secret and name its node. Each handshake has
// its own thread and slot, so a long limit holds up no other; a short one turned away an
// agent of a loaded node (4 slurmds and two jobs on 2 cores), whose direct step then ended
// and started again through sh.
constexpr Milliseconds kHandshakeLimit{10000};
// What the agents' start command says on a node that lacks this muster, and, where shipping
// is allowed, then waits for the bundle, naming its step (JOB.STEP) after these words.
constexpr const char* kNotOnNode = "is not on node";
constexpr const char* kWaitingInStep = "waiting for this build's bundle through Slurm in step ";

// An agent's channel: its TCP connection back to the head.
class SocketChannel : public RemoteCommand {
 public:
  SocketChannel(int fd, std::function<std::string()> last_words)
      : fd_(fd), last_words_(std::move(last_words)) {}
  ~SocketChannel() override { close(fd_); }

  void write(std::string_view bytes) override {
    // An agent that stops reading for this long is as good as lost.
    if (!write_before(fd_, bytes.data(), bytes.size(), Clock::now() + std::chrono::seconds(30)))
      throw Error(ErrorKind::Runtime, "the agent's connection broke, or it stopped reading for 30 s");
  }
  void close_stdin() override { shutdown(fd_, SHUT_WR); }
  bool read(std::string& out, std::string& err, Milliseconds limit) override {
    if (ended_) return false;
    pollfd p{fd_, POLLIN, 0};
    poll(&p, 1, int(limit.count()));
    char buffer[65536];
    ssize_t n = recv(fd_, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) {
      out.append(buffer, size_t(n));
      return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    ended_ = true;
    err += last_words_();
    return false;
  }
  // srun's words tell how an agent ended.
  std::optional<ExitStatus> exit_status() override { return std::nullopt; }
  int wait_fd() const override { return fd_; }

 private:
  int fd_;
  std::function<std::string()> last_words_;
  bool ended_ = false;
};

// Reads one line of at most kMaxNodeName bytes before `deadline`.
std::optional<std::string> read_line(int fd, Clock::time_point deadline) {
  std::string line;
  for (char c; line.size() < kMaxNodeName && read_before(fd, &c, 1, deadline);) {
    if (c == '\n') return line;
    line += c;
  }
  return std::nullopt;
}

bool contains_word(const std::string& line, const std::string& word) {
  for (size_t at = line.find(word); at != std::string::npos; at = line.find(word, at + 1)) {
    auto is_name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'; };
    const bool starts = at == 0 || !is_name_char(line[at - 1]);
    const size_t end = at + word.size();
    // "node1." ends a sentence: a dot followed by nothing or a space still ends the name.
    const bool ends = end == line.size() || !is_name_char(line[end]) ||
                      (line[end] == '.' && (end + 1 == line.size() || line[end + 1] == ' '));
    if (starts && ends) return true;
  }
  return false;
}

// Runs `work` once whoever calls first; every caller then sees the same failure, if any.
template <typename Work>
void once_for_all(std::once_flag& once, std::string& failure, Work&& work) {
  std::call_once(once, [&] {
    try {
      work();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
}

class SlurmAgentLauncher : public AgentLauncher {
 public:
  explicit SlurmAgentLauncher(const ClusterSpec& cluster)
      : cluster_(cluster),
        has_spares_(std::any_of(cluster.nodes.begin(), cluster.nodes.end(), [](const NodeSpec& n) { return n.spare; })) {
    for (size_t i = 0; i < cluster_.nodes.size(); ++i) node_of_host_[cluster_.nodes[i].host] = i;
    agent_fd_.assign(cluster_.nodes.size(), -1);
    called_back_.assign(cluster_.nodes.size(), false);
    if (pipe2(stop_, O_CLOEXEC | O_NONBLOCK) != 0) throw Error(ErrorKind::Runtime, "cannot create a pipe");
  }
  ~SlurmAgentLauncher() override;

  NodeAgent start(size_t node, const AgentStartOptions& options,
                  const std::atomic<bool>& cancelled) override;
  // No handshakes to bound: the agents call in on their own.
  int window(int) const override { return 256; }
  OutsideEnd outside_end(Milliseconds wait) override;

 private:
  void start_step(const AgentStartOptions& options);
  void start_again_through_sh();
  std::vector<std::string> sh_command();
  std::string node_script();
  void launch_srun(const std::vector<std::string>& command);
  bool bundle_wanted_locked() const;
  void ship_bundle();
  void accept_agents();
  void take_agent(int fd);
  void watch_srun(int out_fd);
  // srun's words about `host` once the step had a moment to say them, as ": ..." or "".
  std::string words_about(const std::string& host, Milliseconds wait);

  ClusterSpec cluster_;
  const bool has_spares_;  // the job is to outlive a node: the step is --no-kill
  std::map<std::string, size_t> node_of_host_;
  std::once_flag step_once_, ship_once_;
  std::string step_error_, ship_error_;
  std::vector<std::string> agent_args_;  // after the program: the agent's own, and --call-back
  std::string program_;                  // this muster, as the nodes would find it
  std::optional<std::string> node_program_;  // muster-node beside it, this build's
  Environment env_;                      // srun's: the secret in it, never on a command line
  BundleArchive bundle_;
  std::string node_dir_;                 // this user's own directory on every node (node_script)
  std::string shipped_path_;             // where sbcast puts the bundle on every node, in it
  Shipping shipping_ = Shipping::Allowed;
  SelfCommand self_;
  bool ship_started_ = false;
  std::string secret_;
  int listen_fd_ = -1;
  int stop_[2] = {-1, -1};
  pid_t srun_ = -1;
  std::thread acceptor_, watcher_;
  struct Handshake {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Handshake> handshakes_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<int> agent_fd_;  // by node: -1 until its agent called back
  std::vector<bool> called_back_;  // by node, in this step
  size_t called_back_count_ = 0;
  int step_number_ = 0;           // 1 once the step through sh replaced the direct one
  bool direct_ = false;           // this step starts the agent program itself, without sh
  std::vector<std::string> sh_command_;  // the agents' start through sh (node_script), once made
  std::once_flag again_once_;
  std::string again_error_;
  std::string output_;         // what srun printed, its last kMaxSrunOutput bytes
  bool step_ended_ = false;
  int step_status_ = 0;        // srun's wait status once it ended
};

SlurmAgentLauncher::~SlurmAgentLauncher() {
  [[maybe_unused]] auto w = write(stop_[1], "x", 1);
  if (acceptor_.joinable()) acceptor_.join();
  for (auto& h : handshakes_) h.thread.join();
  if (srun_ > 0) {
    // The session said goodbye to every agent first: the step normally ends on its own.
    std::unique_lock lock(mutex_);
    auto ended = [&] { return step_ended_; };
    if (!changed_.wait_for(lock, std::chrono::seconds(5), ended)) {
      kill(srun_, SIGTERM);  // srun cancels the step: slurmstepd signals what is left
      if (!changed_.wait_for(lock, std::chrono::seconds(5), ended)) kill(srun_, SIGKILL);
    }
  }
  if (watcher_.joinable()) watcher_.join();
  for (int fd : agent_fd_)
    if (fd >= 0) close(fd);
  for (int fd : {listen_fd_, stop_[0], stop_[1]})
    if (fd >= 0) close(fd);
}

NodeAgent SlurmAgentLauncher::start(size_t node, const AgentStartOptions& options,
                                    const std::atomic<bool>& cancelled) {
  once_for_all(step_once_, step_error_, [&] { start_step(options); });
  const std::string& host = cluster_.nodes.at(node).host;
  if (!step_error_.empty()) throw SshError(SshFailure::RemoteCommand, host, step_error_);

  auto deadline = Clock::now() + options.hello_timeout;
  int fd = -1;
  int step = 0;
  for (bool shipping_waited = false;;) {
    bool ship = false, again = false;
    {
      std::unique_lock lock(mutex_);
      if (step != step_number_) {  // a step in place of the direct one: its agents' whole wait
        step = step_number_;
        deadline = Clock::now() + options.hello_timeout;
      }
      // Every node's agent, not this one's alone: the step ends on every node when one
      // fails (--kill-on-bad-exit), and an agent handed out of a direct step that then starts
      // again through sh would be lost. (Out of a step that just ended, an agent whose hello
      // arrived is handed out as before: the other node's failure is the one to read.)
      while (called_back_count_ < agent_fd_.size() && !step_ended_ && !cancelled &&
             Clock::now() < deadline && !(ship = bundle_wanted_locked()) && step == step_number_)
        changed_.wait_for(lock, Milliseconds(100));
      if (step != step_number_) continue;
      again = step_ended_ && direct_ && called_back_count_ < agent_fd_.size();
      if (!again && !ship) std::swap(fd, agent_fd_[node]);
    }
    if (cancelled) break;
    // The direct step ended before every agent called back: a node without the program
    // (slurmstepd's "execve(): ..." may be lost as it kills the step), or another failure.
    // Every node starts again through sh (node_script), which finds another way or says why.
    if (again) {
      once_for_all(again_once_, again_error_, [&] { start_again_through_sh(); });
      if (!again_error_.empty()) throw SshError(SshFailure::RemoteCommand, host, again_error_);
      continue;
    }
    // A node without this muster waits for its bundle: ship it through Slurm, once for all.
    if (!ship) break;
    once_for_all(ship_once_, ship_error_, [&] { ship_bundle(); });
    if (!ship_error_.empty()) throw SshError(SshFailure::RemoteCommand, host, ship_error_);
    if (!shipping_waited) deadline = Clock::now() + options.hello_timeout;
    shipping_waited = true;
  }
  if (cancelled) {
    if (fd >= 0) close(fd);
    throw SshError(SshFailure::Connection, host, "called off");
  }
  if (fd < 0) {
    std::string status;
    {
      std::lock_guard lock(mutex_);
      if (step_ended_) status = "srun " + ExitStatus::from_wait_status(step_status_).describe();
    }
    throw SshError(SshFailure::RemoteCommand, host,
                   status.empty()
                       ? fmt::format("its agent did not call back within {} s{}",
                                     std::chrono::duration_cast<std::chrono::seconds>(options.hello_timeout).count(),
                                     words_about(host, Milliseconds(0)))
                       : fmt::format("the srun step of muster's agents ended ({}) before this node's "
                                     "agent called back{}", status, words_about(host, Milliseconds(0))));
  }

  NodeAgent out;
  out.agent.command = std::make_unique<SocketChannel>(fd, [this, host] {
    const std::string words = words_about(host, Milliseconds(1500));  // " (srun: ...)"
    return words.empty() ? words : words.substr(1);
  });
  for (;;) {
    if (cancelled) throw SshError(SshFailure::Connection, host, "called off");
    std::string in;
    const bool open = out.agent.command->read(in, out.agent.stderr_text, Milliseconds(100));
    out.agent.reader.feed(in);
    while (auto frame = out.agent.reader.next()) {
      if (frame->kind == FrameKind::Hello) {
        out.agent.hello = node_hello_from_json(frame->payload);
        return out;
      }
      if (frame->kind == FrameKind::Fail)
        throw SshError(SshFailure::RemoteCommand, host, "the agent failed: " + frame->payload);
    }
    if (!open)
      throw SshError(SshFailure::RemoteCommand, host,
                     "its agent called back, then ended before its hello" + out.agent.stderr_text);
    if (Clock::now() > deadline)
      throw SshError(SshFailure::Timeout, host, "its agent called back but said no hello in time");
  }
}

void SlurmAgentLauncher::start_step(const AgentStartOptions& options) {
  // Where the agents call back: every address of this machine, in turn, until one answers.
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listen_fd_, 1024) != 0 || getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw Error(ErrorKind::Runtime, fmt::format("cannot listen for the agents: {}", std::strerror(errno)));
  std::vector<std::string> heads;
  for (const auto& a : local_addresses()) heads.push_back(fmt::format("{}:{}", a.address, ntohs(addr.sin_port)));
  if (heads.empty())
    throw Error(ErrorKind::Runtime, "this machine has no IPv4 address up for the agents to call back to");
  secret_ = new_job_secret();
  std::istringstream words(options.agent_args);
  for (std::string w; words >> w;) agent_args_.push_back(w);
  agent_args_.push_back("--call-back");
  agent_args_.push_back(fmt::format("{}", fmt::join(heads, ",")));

  // This very muster at its own path (a shared file system or the package), as srun's own
  // programs are found; else, where shipping is allowed, this build's bundle (see
  // node_script). A node without either says so in words the head looks for (kNotOnNode,
  // kWaitingInStep).
  self_ = self_command();
  program_ = self_.program;
  if (program_ == "/proc/self/exe") program_ = std::filesystem::read_symlink("/proc/self/exe").string();
  node_program_ = installed_node_program();
  shipping_ = options.shipping;
  env_ = Environment::current();
  env_.set(kAgentSecretVariable, secret_);
  for (const auto& [name, value] : self_.env) env_.set(name, value);
  // srun passes TMPDIR on, so the nodes' TMPDIR is this one: the bundle is shipped into, and
  // kept in, this user's own directory under it on every node, never in a shared one.
  const std::string tmpdir = env_.get("TMPDIR");
  node_dir_ = fmt::format("{}/muster-{}", tmpdir.empty() ? "/tmp" : tmpdir, getuid());
  shipped_path_ = fmt::format("{}/bundle-{}.tar.gz", node_dir_, new_job_secret().substr(0, 16));
  // Where the nodes see this muster's files (a package on every node, a shared file system)
  // srun starts the agent program itself: sh in between is a process more on every node, on
  // every job's path. Where that fails, the step starts again through sh (see start).
  direct_ = !muster_bundle_dir();
  std::vector<std::string> direct = {node_program_.value_or(program_)};
  direct.insert(direct.end(), agent_args_.begin(), agent_args_.end());
  launch_srun(direct_ ? direct : sh_command());
  acceptor_ = signal_free_thread([this] { accept_agents(); });
}

// The second step, through sh, in place of the direct one, which ended: what called back
// from it is closed, and a late handshake from it is turned away (step_number_).
void SlurmAgentLauncher::start_again_through_sh() {
  {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < agent_fd_.size(); ++i) {
      if (agent_fd_[i] >= 0) close(agent_fd_[i]);
      agent_fd_[i] = -1;
      called_back_[i] = false;
    }
    called_back_count_ = 0;
    ++step_number_;
    direct_ = false;
    output_.clear();
    step_ended_ = false;
  }
  if (watcher_.joinable()) watcher_.join();  // it has reaped the first srun
  try {
    launch_srun(sh_command());
  } catch (...) {
    std::lock_guard lock(mutex_);
    step_ended_ = true;  // no step runs: nothing for anyone to wait for or to signal
    srun_ = -1;
    throw;
  }
}

// The agents' start through sh, made when first needed: with shipping allowed, it names the
// bundle's SHA-256, and the bundle is made only for a step that may need it.
std::vector<std::string> SlurmAgentLauncher::sh_command() {
  if (sh_command_.empty()) {
    sh_command_ = {"/bin/sh", "-c", node_script(), "sh", program_};
    sh_command_.insert(sh_command_.end(), self_.argv.begin() + 1, self_.argv.end());
    sh_command_.insert(sh_command_.end(), agent_args_.begin(), agent_args_.end());
  }
  return sh_command_;
}

// The agent's start on a node, run by sh with this muster's command line as "$@":
// 0. this user's own directory on the node ($c, node_dir_) is made where missing, on every
//    node of the step, since sbcast writes to all of them;
// 1. muster-node beside the head's muster, when the head has this build's there and the
//    node has it too (it loads a third fewer libraries: a node's start is on every job's
//    path); else muster at the head's path, when the node has it;
// 2. else, once $c proved to be this user's own directory (no link, made mode 0700), a
//    bundle of this build the node already holds in it;
// 3. else (shipping allowed) it says so, naming its step, and waits up to 120 s for the head
//    to sbcast the bundle into $c. Before unpacking it checks that the file is this user's
//    own and no link, and that its SHA-256 is the one on this command line (the command
//    line is public, a digest may be; the file's content is what counts); it unpacks it,
//    removes the shipped file, runs the bundle once to prove it works on this node, checks
//    its build id and keeps it for the next session. Without shipping it fails, naming the
//    node. Nothing in a shared directory is ever run.
std::string SlurmAgentLauncher::node_script() {
  // fail: its words, then a second for slurmstepd to forward them before the step is killed
  // (--kill-on-bad-exit), which would otherwise drop them.
  const std::string fail = "fail() { echo \"muster: $*\" >&2; sleep 1; exit 3; }; ";
  const std::string missing = "$1 " + std::string(kNotOnNode) + " $(hostname)";
  // Made on every node of the step, since sbcast writes to all of them; checked where used.
  const std::string make_own_dir =
      "c=" + shell_quote(node_dir_) + "; [ -e \"$c\" ] || [ -L \"$c\" ] || mkdir -m 700 \"$c\" 2>/dev/null; ";
  const std::string check_own_dir =
      "if [ -L \"$c\" ] || [ ! -d \"$c\" ] || [ ! -O \"$c\" ]; then "
      "fail \"$c on $(hostname) is not this user's own directory; remove it, or set TMPDIR elsewhere\"; fi; "
      "chmod 700 \"$c\" || fail \"cannot make $c on $(hostname) this user's alone\"; ";
  const std::string installed =
      node_program_ ? "n=" + shell_quote(*node_program_) + "; if [ -x \"$n\" ]; then exec \"$n\" " +
                          shell_command(agent_args_) + "; fi; "
                    : "";
  if (shipping_ == Shipping::Forbidden)
    return fail + installed + "[ -x \"$1\" ] || fail \"" + missing +
           ", and --no-ship forbids shipping this build's bundle there\"; exec \"$@\"";
  const std::string digest = sha256_hex(bundle_.get());
  return fail + make_own_dir + installed + "if [ -x \"$1\" ]; then exec \"$@\"; fi; " + check_own_dir +
         "bid=" + shell_quote(muster_build_id()) + "; b=\"$c/$bid\"; s=" + shell_quote(shipped_path_) + "; "
         "if [ ! -f \"$b/complete\" ]; then "
         "echo \"muster: " + missing + ": " + kWaitingInStep + "$SLURM_JOB_ID.$SLURM_STEP_ID\" >&2; "
         "n=0; until [ -f \"$s.ready\" ]; do n=$((n+1)); "
         "[ $n -le 1200 ] || fail \"no bundle reached $(hostname) within 120 s\"; sleep 0.1; done; "
         "if [ -L \"$s\" ] || [ ! -f \"$s\" ] || [ ! -O \"$s\" ]; then rm -f \"$s\" \"$s.ready\"; "
         "fail \"$s on $(hostname) is a link or not this user's own file: refused, nothing of it run\"; fi; "
         "sum=$(sha256sum < \"$s\") || sum=; sum=${sum%% *}; "
         "if [ \"$sum\" != " + digest + " ]; then rm -f \"$s\" \"$s.ready\"; "
         "fail \"$s on $(hostname) is not the bundle the head shipped (SHA-256 $sum, expected " + digest +
         "): refused, nothing of it run\"; fi; "
         "t=\"$c/.$bid.$$\"; rm -rf \"$t\"; mkdir -m 700 \"$t\" || fail \"cannot make $t on $(hostname)\"; "
         "if ! tar -xzf \"$s\" -C \"$t\"; then rm -rf \"$t\" \"$s\" \"$s.ready\"; "
         "fail \"the bundle Slurm shipped does not unpack on $(hostname)\"; fi; rm -f \"$s\" \"$s.ready\"; "
         "if ! v=$(\"$t/ld.so\" --library-path \"$t/lib\" \"$t/muster\" --version 2>&1); then "
         "rm -rf \"$t\"; fail \"the bundle Slurm shipped does not run on $(hostname): $v\"; fi; "
         "read -r got < \"$t/build-id\" || got=; if [ \"$got\" != \"$bid\" ]; then "
         "rm -rf \"$t\"; fail \"the bundle Slurm shipped to $(hostname) is another build: $got\"; fi; "
         ": > \"$t/complete\"; mv -T \"$t\" \"$b\" 2>/dev/null || rm -rf \"$t\"; fi; "
         "export " + std::string(kBundleVariable) + "=\"$b\"; "
         "exec \"$b/ld.so\" --library-path \"$b/lib\" --argv0 muster \"$b/muster\" " + shell_command(agent_args_);
}

void SlurmAgentLauncher::launch_srun(const std::vector<std::string>& command) {
  std::vector<std::string> hosts;
  for (const auto& node : cluster_.nodes) hosts.push_back(node.host);
  const std::string n = std::to_string(hosts.size());
  std::vector<std::string> argv = {
      "srun", "--job-name=muster-agents", "--nodes=" + n, "--ntasks=" + n, "--ntasks-per-node=1",
      "--nodelist=" + fold_hostlist(hosts),
      "--overlap",             // the allocation's own tasks may hold every CPU already
      "--kill-on-bad-exit=1",  // an agent that fails ends the step, and so every agent
      "--cpu-bind=none",       // the agent binds each rank itself
      // Each agent starts its ranks where the job says (the caller's directory, or $HOME on a
      // node without it); the agent itself stands in /, or slurmstepd would complain, on
      // every node without the caller's directory, of going to /tmp instead.
      "--chdir=/",
      "--mpi=none", "--input=none"};
  // With spares the job is to outlive a node: Slurm would otherwise end the step, and every
  // agent in it, when it sets a lost node DOWN. (The allocation itself needs salloc's or
  // sbatch's --no-kill for the same reason; run.md says so.)
  if (has_spares_) argv.push_back("--no-kill");
  argv.push_back("--");
  argv.insert(argv.end(), command.begin(), command.end());
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw Error(ErrorKind::Runtime, "cannot create a pipe");
  try {
    srun_ = spawn_helper(argv, env_, out[1], out[1], /*own_session=*/true);
  } catch (...) {
    close(out[0]);
    close(out[1]);
    throw;
  }
  close(out[1]);
  watcher_ = signal_free_thread([this, fd = out[0]] { watch_srun(fd); });
}

// A node said it waits for the bundle, and no one has shipped it yet.
bool SlurmAgentLauncher::bundle_wanted_locked() const {
  return !ship_started_ && shipping_ == Shipping::Allowed && output_.find(kWaitingInStep) != std::string::npos;
}

// Ships this build's bundle with sbcast to every node of the agents' step (which each made
// node_dir_ its own), under a name made for this session, then a second, empty file beside
// it: sbcast returns once every node holds the first, so the second tells the waiting nodes
// the bundle is whole. The nodes check the bundle's SHA-256 before they unpack it.
void SlurmAgentLauncher::ship_bundle() {
  {
    std::lock_guard lock(mutex_);
    ship_started_ = true;
  }
  char staged[] = "/tmp/muster-bundle-XXXXXX";
  const int fd = mkstemp(staged);
  if (fd < 0) throw Error(ErrorKind::Runtime, fmt::format("cannot stage the bundle for sbcast: {}", std::strerror(errno)));
  close(fd);
  struct Unstage {
    const char* path;
    ~Unstage() { unlink(path); }
  } unstage{staged};
  const std::string& archive = bundle_.get();
  std::ofstream(staged, std::ios::binary) << archive;
  std::error_code size_error;
  if (std::filesystem::file_size(staged, size_error) != archive.size())
    throw Error(ErrorKind::Runtime, fmt::format("cannot write the bundle to {} for sbcast", staged));
  // The step's nodes (a node of the allocation outside it has no node_dir_ to write to), as
  // the waiting nodes name it; each copy within 120 s.
  std::vector<std::string> step;
  {
    std::lock_guard lock(mutex_);
    if (const size_t at = output_.find(kWaitingInStep); at != std::string::npos) {
      const size_t from = at + std::strlen(kWaitingInStep);
      const size_t end = output_.find_first_not_of("0123456789.", from);
      const std::string id = output_.substr(from, end == std::string::npos ? std::string::npos : end - from);
      if (id.find('.') != std::string::npos && id.front() != '.' && id.back() != '.') step = {"--jobid=" + id};
    }
  }
  auto sbcast = [&](const std::string& from, const std::string& to) {
    std::vector<std::string> argv = {"sbcast", "--force"};
    argv.insert(argv.end(), step.begin(), step.end());
    argv.insert(argv.end(), {from, to});
    run_checked_within(argv, std::chrono::seconds(120),
                       fmt::format("muster is not at {} on every node, and shipping this build's bundle "
                                   "there failed", program_));
  };
  sbcast(staged, shipped_path_);
  std::ofstream(staged, std::ios::trunc).close();
  sbcast(staged, shipped_path_ + ".ready");
}

void SlurmAgentLauncher::watch_srun(int out_fd) {
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(out_fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    std::lock_guard lock(mutex_);
    output_.append(buffer, size_t(n));
    if (output_.size() > kMaxSrunOutput) output_.erase(0, output_.size() - kMaxSrunOutput);
    changed_.notify_all();
  }
  close(out_fd);
  int status = 0;
  while (waitpid(srun_, &status, 0) < 0 && errno == EINTR) {}
  std::lock_guard lock(mutex_);
  step_ended_ = true;
  step_status_ = status;
  changed_.notify_all();
}

void SlurmAgentLauncher::accept_agents() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (fds[1].revents) return;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    // Finished handshakes give their threads back first: a flood of clients holds at most
    // kMaxPendingHandshakes threads, however long it lasts.
    std::erase_if(handshakes_, [](Handshake& h) {
      if (!*h.done) return false;
      h.thread.join();
      return true;
    });
    if (handshakes_.size() >= kMaxPendingHandshakes) {
      close(fd);
      continue;
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    handshakes_.push_back({signal_free_thread([this, fd, done] {
                             take_agent(fd);
                             *done = true;
                           }),
                           done});
  }
}

// Proves the caller holds the secret and learns its node; anything else is turned away.
void SlurmAgentLauncher::take_agent(int fd) {
  const auto deadline = Clock::now() + kHandshakeLimit;
  int step_number;
  {
    std::lock_guard lock(mutex_);
    step_number = step_number_;
  }
  std::optional<std::string> name;
  if (check_secret(fd, secret_, kAgentCallBackPurpose, kHandshakeLimit).empty()) name = read_line(fd, deadline);
  auto it = name ? node_of_host_.find(*name) : node_of_host_.end();
  if (it == node_of_host_.end()) {
    close(fd);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::lock_guard lock(mutex_);
  if (called_back_[it->second] || step_number != step_number_) {  // a node calls back once a step
    close(fd);
    return;
  }
  agent_fd_[it->second] = fd;
  called_back_[it->second] = true;
  ++called_back_count_;
  changed_.notify_all();
}

std::string SlurmAgentLauncher::words_about(const std::string& host, Milliseconds wait) {
  std::unique_lock lock(mutex_);
  // srun reports a lost node or a cancelled step a moment after the connection drops.
  changed_.wait_for(lock, wait, [&] { return step_ended_ || contains_word(output_, host); });
  std::string words = srun_words_about(output_, host, step_ended_ ? Fallback::LastLines : Fallback::None);
  return words.empty() ? "" : " (srun: " + words + ")";
}

// slurmstepd's banners ("*** STEP 5.0 ON node1 CANCELLED AT ... DUE TO TIME LIMIT ***") and
// srun's word for a node that failed: the lines that say the step was ended from outside.
bool is_outside_end(const std::string& line) {
  return line.find("***") != std::string::npos || line.find("Node failure") != std::string::npos ||
         line.find("Force Terminated") != std::string::npos;
}

AgentLauncher::OutsideEnd SlurmAgentLauncher::outside_end(Milliseconds wait) {
  auto said = [&] {
    std::istringstream in(output_);
    std::string words;
    for (std::string line; std::getline(in, line);)
      if (is_outside_end(line)) words += (words.empty() ? "" : " / ") + line.substr(line.rfind("srun: ", 0) == 0 ? 6 : 0);
    return words;
  };
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, wait, [&] { return step_ended_ || !said().empty(); });
  const std::string words = said();
  if (words.empty()) return {};
  // With spares the step itself is --no-kill; what Slurm ended for a node's failure then is
  // the allocation, which only salloc's or sbatch's own --no-kill keeps.
  const std::string hint = has_spares_ && words.find("NODE FAILURE") != std::string::npos
                               ? "; spares outlive a lost node only in an allocation made with --no-kill "
                                 "(salloc -k, sbatch -k)"
                               : "";
  return {"Slurm ended the job's step: " + words + hint, words.find("TIME LIMIT") != std::string::npos};
}

}  // namespace

std::shared_ptr<AgentLauncher> make_slurm_agent_launcher(const ClusterSpec& cluster) {
  return std::make_shared<SlurmAgentLauncher>(cluster);
}

std::string srun_words_about(const std::string& output, const std::string& host, Fallback fallback) {
  std::vector<std::string> lines, about;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (line.rfind("srun: ", 0) == 0) line.erase(0, 6);
    lines.push_back(line);
    if (contains_word(line, host)) about.push_back(line);
  }
  if (about.empty() && fallback == Fallback::None) return "";
  const auto& chosen = about.empty() ? lines : about;
  std::string words;
  const size_t from = chosen.size() > 3 ? chosen.size() - 3 : 0;
  for (size_t i = from; i < chosen.size(); ++i) words += (words.empty() ? "" : " / ") + chosen[i];
  return words;
}

}  // namespace muster
