// Benchmark (not a test): the head at hundreds to thousands of nodes, modelled with in-process
// fake agents (tests/fakes/fake_agent_transport.h: the real frame protocol over an in-memory
// channel, no SSH, no processes). Per size, in a child process of its own so that each figure
// is that size's alone: the time from the start to every agent's hello, to the end of a
// `run -- true` job (one rank per node), the head's CPU time (user + system), its peak resident
// memory, and its thread count once every node said hello.
// Usage: build/tests/bench/head_scale_bench [NODES...]   (default 256 1024 4096)
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "launcher/cluster/rank_plan.h"
#include "launcher/job/session_job.h"
#include "launcher/remote/session.h"
#include "tests/fakes/fake_agent_transport.h"

using namespace muster;
using Clock = std::chrono::steady_clock;

namespace {

struct Discard : JobOutput {
  void line(int, OutputStream, std::string_view) override {}
  void flush() override {}
};

int threads_now() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

double cpu_seconds(const rusage& u) {
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// One size, in this (child) process; prints its row.
int measure(int nodes) {
  // Each link holds descriptors of its own; the head raises its soft limit as a user would.
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);

  auto transport = std::make_shared<testing::FakeAgentTransport>();
  ClusterSpec cluster;
  cluster.source = "bench";
  for (int i = 0; i < nodes; ++i) {
    transport->nodes[fmt::format("a{}", i)].gives_wait_fd = true;  // as an SSH socket
    cluster.nodes.push_back(NodeSpec{fmt::format("n{}", i), fmt::format("a{}", i), {1}, {}, {}, {}});
  }
  const auto start = Clock::now();
  SessionOptions options;
  auto session = ClusterSession::open(transport, cluster, options, {});
  const double hello_s = std::chrono::duration<double>(Clock::now() - start).count();
  const int threads = threads_now();

  RankPlan plan = make_rank_plan(cluster, std::nullopt, MapBy::Slot);
  LaunchRequest request;
  request.argv = {"true"};
  request.job.job_id = "bench";
  Discard output;
  const JobResult result = run_over_session(*session, plan, request, TeardownPolicy{}, output, {});
  const double job_s = std::chrono::duration<double>(Clock::now() - start).count();
  session.reset();
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  std::printf("%7d %11.2f %11.2f %9.2f %10ld %9d %s\n", nodes, hello_s, job_s, cpu_seconds(u),
              u.ru_maxrss / 1024, threads, result.end == JobEnd::Completed ? "completed" : "FAILED");
  std::fflush(stdout);  // the child leaves by _exit, which flushes nothing
  return result.end == JobEnd::Completed ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {256, 1024, 4096};
  std::printf("%7s %11s %11s %9s %10s %9s\n", "nodes", "hellos s", "job end s", "cpu s", "peak MiB", "threads");
  std::fflush(stdout);
  int status = 0;
  for (int nodes : sizes) {
    const pid_t child = fork();
    if (child == 0) _exit(measure(nodes));
    int child_status = 0;
    waitpid(child, &child_status, 0);
    if (!WIFEXITED(child_status) || WEXITSTATUS(child_status) != 0) {
      std::printf("%7d failed (status %d)\n", nodes, child_status);
      status = 1;
    }
  }
  return status;
}
