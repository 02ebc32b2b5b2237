// Benchmark (not a test): how long `muster stacks` takes from the request to the printed
// report for 8 torch Gloo ranks over 4 test hosts x 2 slots (tests/e2e/stacks/hang.py, rank 5
// asleep outside the all-reduce), against the peer a person reaches for today: gdb's
// `thread apply all bt` on every rank, each host's ranks read one after the other and the
// hosts at once. Median of RUNS each. Needs root, gdb and python3-torch.
// Run: build/tests/bench/stacks_bench [RUNS]
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tests/bench/measure.h"
#include "tests/support/command_runner.h"
#include "tests/support/test_cluster.h"

using muster::bench::median;
using muster::testing::RunningCommand;
using muster::testing::TestCluster;

int main(int argc, char** argv) {
  std::string why = TestCluster::unavailable_reason();
  if (why.empty() && access("/usr/bin/gdb", X_OK) != 0) why = "needs gdb (the peer)";
  if (!why.empty()) {
    std::fprintf(stderr, "stacks_bench: %s\n", why.c_str());
    return 2;
  }
  const int runs = argc > 1 ? std::atoi(argv[1]) : 5;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  TestCluster cluster(4);
  const std::string file = cluster.write_cluster_file("launch:\n  slots: 2\n");
  RunningCommand job(cluster.muster_argv({"run", "-f", file, "--timeout", "1800", "--", "/usr/bin/python3",
                                          MUSTER_SOURCE_DIR "/tests/e2e/stacks/hang.py", "odd"}));
  for (int rank = 0; rank < 8; ++rank)
    if (job.read_out_until(fmt::format("[{}] in place", rank), std::chrono::seconds(300)).find(
            fmt::format("[{}] in place", rank)) == std::string::npos) {
      std::fprintf(stderr, "stacks_bench: rank %d never got in place\n", rank);
      return 1;
    }
  // A ratio of a report that failed would measure nothing: it must name rank 5 first.
  const auto first = cluster.muster({"stacks"}, 120);
  if (first.exit_code != 0 || first.out.find("rank 5 (") == std::string::npos) {
    std::fprintf(stderr, "stacks_bench: muster stacks failed (exit %d):\n%s%s\n", first.exit_code,
                 first.out.c_str(), first.err.c_str());
    job.signal(SIGINT);
    job.wait(std::chrono::seconds(60));
    return 1;
  }
  auto m = median(cluster.muster_argv({"stacks"}), runs);
  // The peer: gdb on each rank of a host in turn, the four hosts at once.
  std::string script = "pids=''; ";
  for (int i = 0; i < cluster.size(); ++i) {
    std::string pids;
    for (pid_t pid : cluster.processes_on(i))
      if (muster::testing::process_file(pid, "cmdline").find("hang.py") != std::string::npos &&
          muster::testing::process_file(pid, "comm").find("python") != std::string::npos)
        pids += " " + std::to_string(pid);
    script += fmt::format("(for p in{}; do gdb -p $p -batch -nx -ex 'thread apply all bt' >/dev/null 2>&1; done) & ", pids);
  }
  script += "wait";
  auto g = median({"/bin/sh", "-c", script}, runs);
  if (m.status) {
    std::fprintf(stderr, "stacks_bench: muster stacks exited %d in a timed run: no ratio\n", m.status);
    job.signal(SIGINT);
    job.wait(std::chrono::seconds(60));
    return 1;
  }
  std::printf("8 torch Gloo ranks over 4 hosts, every rank's stacks (median of %d)\n", runs);
  std::printf("%-8s %10s %10s %8s\n", "", "muster s", "gdb s", "ratio");
  std::printf("%-8s %10.3f %10.3f %8.2f\n", "wall", m.seconds, g.seconds, m.seconds / g.seconds);
  if (m.status || g.status) std::printf("(exit statuses: muster stacks %d, gdb %d)\n", m.status, g.status);
  job.signal(SIGINT);
  job.wait(std::chrono::seconds(60));
  return 0;
}
