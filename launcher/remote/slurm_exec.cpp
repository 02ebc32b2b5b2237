#include "launcher/remote/slurm_exec.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <map>

#include <fmt/format.h>

#include "launcher/cluster/hostlist.h"
#include "launcher/error.h"
#include "launcher/local/exit_status.h"
#include "launcher/local/line_buffer.h"
#include "launcher/local/posix_spawner.h"
#include "launcher/local/shutdown_signals.h"

namespace muster {
namespace {

// The step's task i runs on its i-th node in Slurm's order, which is the allocation's: the
// order of SLURM_JOB_NODELIST. Returns the cluster's node index of each task.
std::vector<size_t> nodes_by_task(const ClusterSpec& cluster, const Environment& env) {
  std::string list = env.get("SLURM_JOB_NODELIST");
  if (list.empty()) list = env.get("SLURM_NODELIST");
  const std::vector<std::string> allocation = expand_hostlist(list);
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < allocation.size(); ++i) position.emplace(allocation[i], i);
  std::vector<size_t> order(cluster.nodes.size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
    if (!position.count(cluster.nodes[i].host))
      throw Error(ErrorKind::Config,
                  fmt::format("{}: not a node of Slurm's job {} ({}); exec through srun reaches only "
                              "the allocation's nodes: name those, or use --launcher ssh",
                              cluster.nodes[i].host, env.get("SLURM_JOB_ID"), list));
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return position[cluster.nodes[a].host] < position[cluster.nodes[b].host];
  });
  return order;
}

// Reads srun's two pipes to their end, line by line. A signal to muster cancels the step:
// srun's SIGTERM ends every task; SIGKILL follows if srun has not ended within 10 s.
class SrunStep {
 public:
  SrunStep(pid_t pid, int out_fd, int err_fd) : pid_(pid), fds_{out_fd, err_fd} {}
  ~SrunStep() {
    for (int fd : fds_)
      if (fd >= 0) close(fd);
  }

  template <typename OnLine>
  int run(const ShutdownSignals& signals, OnLine on_line) {
    LineBuffer lines[2];
    std::optional<std::chrono::steady_clock::time_point> kill_at;
    int received = 0;
    while (fds_[0] >= 0 || fds_[1] >= 0) {
      pollfd polled[3] = {{fds_[0], POLLIN, 0}, {fds_[1], POLLIN, 0}, {signals.fd(), POLLIN, 0}};
      poll(polled, 3, 200);
      if (polled[2].revents & POLLIN) {
        unsigned char signal_number = 0;
        if (read(signals.fd(), &signal_number, 1) == 1 && !received) {
          received = signal_number;
          kill(pid_, SIGTERM);
          kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        }
      }
      if (kill_at && std::chrono::steady_clock::now() > *kill_at) kill(pid_, SIGKILL);
      for (int stream = 0; stream < 2; ++stream) {
        if (fds_[stream] < 0 || !(polled[stream].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buffer[65536];
        const ssize_t n = read(fds_[stream], buffer, sizeof buffer);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n > 0) {
          lines[stream].feed({buffer, size_t(n)}, [&](std::string_view line) { on_line(stream, line); });
          continue;
        }
        lines[stream].finish([&](std::string_view line) { on_line(stream, line); });
        close(fds_[stream]);
        fds_[stream] = -1;
      }
    }
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
    if (received) return 128 + received;
    return ExitStatus::from_wait_status(status).shell_code();
  }

 private:
  pid_t pid_;
  int fds_[2];
};

}  // namespace

std::pair<std::optional<size_t>, std::string_view> split_srun_label(std::string_view line) {
  size_t at = line.find_first_not_of(' ');
  const size_t digits = at == std::string_view::npos ? at : line.find_first_not_of("0123456789", at);
  if (at == std::string_view::npos || digits == at || digits == std::string_view::npos ||
      digits - at > 9 || line.substr(digits, 2) != ": ")
    return {std::nullopt, line};
  return {std::stoul(std::string(line.substr(at, digits - at))), line.substr(digits + 2)};
}

SrunExec exec_through_srun(const ClusterSpec& cluster, const std::vector<std::string>& argv,
                           const Environment& env, const ExecLineSink& sink) {
  const std::vector<size_t> node_of_task = nodes_by_task(cluster, env);
  SrunExec result;
  result.nodes.resize(cluster.nodes.size());
  std::vector<std::string> hosts;
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    result.nodes[i].host = cluster.nodes[i].host;
    result.nodes[i].status = 0;
    hosts.push_back(cluster.nodes[i].host);
  }
  const std::string n = std::to_string(hosts.size());
  std::vector<std::string> srun = {
      "srun", "--job-name=muster-exec", "--nodes=" + n, "--ntasks=" + n, "--ntasks-per-node=1",
      "--nodelist=" + fold_hostlist(hosts),
      "--overlap",             // the allocation's own tasks may hold every CPU already
      "--kill-on-bad-exit=0",  // as pdsh: one node's failure ends only its own command
      "--cpu-bind=none", "--mpi=none", "--input=none", "--label", "--"};
  srun.insert(srun.end(), argv.begin(), argv.end());

  ShutdownSignals signals;  // before srun starts: a Ctrl-C from now on cancels its step
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw Error(ErrorKind::Runtime, "cannot create a pipe");
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    throw Error(ErrorKind::Runtime, "cannot create a pipe");
  }
  pid_t pid = -1;
  try {
    pid = spawn_helper(srun, env, out[1], err[1], /*own_session=*/true);
  } catch (...) {
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    throw;
  }
  close(out[1]);
  close(err[1]);

  SrunStep step(pid, out[0], err[0]);
  result.exit_status = step.run(signals, [&](int stream, std::string_view line) {
    const OutputStream to = stream == 0 ? OutputStream::Stdout : OutputStream::Stderr;
    auto [task, text] = split_srun_label(line);
    // srun's own words ("srun: error: node2: task 1: Exited with exit code 3") go on as srun
    // prints them, under no node; so does a line no task of ours could have tagged.
    if (!task || *task >= node_of_task.size()) {
      if (sink) sink("", OutputStream::Stderr, line);
      else result.srun_said.append(line).append("\n");
      return;
    }
    NodeExecResult& node = result.nodes[node_of_task[*task]];
    if (sink) return sink(node.host, to, text);
    node.keep_line(to, text);
  });
  return result;
}

}  // namespace muster
