// Benchmark (not a test), in three parts, median of RUNS each:
// 1. How long `muster stacks` takes from the request to the printed report for 8 torch Gloo
//    ranks over 4 test hosts x 2 slots (tests/e2e/stacks/hang.py, rank 5 asleep outside the
//    all-reduce), against the peer a person reaches for today: gdb's `thread apply all bt` on
//    every rank, each host's ranks read one after the other and the hosts at once.
// 2. What it costs a running job: the same 8 ranks doing all-reduces (allreduce_work.py), their
//    time with `muster stacks` asked every second beside them, against without.
// 3. The report at 64 ranks: 16 test hosts x 4 slots of sleeping Python ranks.
// Needs root, gdb and python3-torch.
// Run: build/tests/bench/stacks_bench [RUNS]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tests/bench/measure.h"
#include "tests/support/build_paths.h"
#include "tests/support/command_runner.h"
#include "tests/support/test_cluster.h"

using muster::testing::source_path;

using muster::bench::median;
using muster::testing::RunningCommand;
using muster::testing::TestCluster;

namespace {

const std::string kHangPy = source_path("/tests/e2e/stacks/hang.py");

// Waits for each of the job's `ranks` ranks to say it is in place, then asks for one report,
// which must contain `expected`: a time of a report that failed would measure nothing. Where
// it does not, says why and stops the job.
bool ready_to_measure(const TestCluster& cluster, RunningCommand& job, int ranks, const std::string& expected) {
  for (int rank = 0; rank < ranks; ++rank) {
    const std::string line = fmt::format("[{}] in place", rank);
    if (job.read_out_until(line, std::chrono::seconds(300)).find(line) == std::string::npos) {
      std::fprintf(stderr, "stacks_bench: rank %d of %d never got in place\n", rank, ranks);
      job.signal(SIGINT);
      job.wait(std::chrono::seconds(60));
      return false;
    }
  }
  const auto first = cluster.muster({"stacks"}, 120);
  if (first.exit_code == 0 && first.out.find(expected) != std::string::npos) return true;
  std::fprintf(stderr, "stacks_bench: muster stacks at %d ranks failed (exit %d):\n%s%s\n", ranks,
               first.exit_code, first.out.c_str(), first.err.c_str());
  job.signal(SIGINT);
  job.wait(std::chrono::seconds(60));
  return false;
}

// Part 1: the report against gdb on every rank.
int against_gdb(int runs) {
  TestCluster cluster(4);
  const std::string file = cluster.write_cluster_file("launch:\n  slots: 2\n");
  RunningCommand job(cluster.muster_argv({"run", "-f", file, "--timeout", "1800", "--", "/usr/bin/python3",
                                          kHangPy, "odd"}));
  // It must name rank 5 first.
  if (!ready_to_measure(cluster, job, 8, "rank 5 (")) return 1;
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

// The seconds rank 0 says the all-reduces took ("[0] work took 3.210 s"), or -1.
double work_seconds(const std::string& out) {
  const std::string mark = "work took ";
  const size_t at = out.find(mark);
  return at == std::string::npos ? -1 : std::atof(out.c_str() + at + mark.size());
}

// Part 2: the job's all-reduces timed alone and with `muster stacks` every second, in turn.
int cost_to_a_job(int runs) {
  TestCluster cluster(4);
  const std::string file = cluster.write_cluster_file("launch:\n  slots: 2\n");
  const std::vector<std::string> job = {"run", "-f", file, "--", "/usr/bin/python3",
                                         source_path("/tests/bench/allreduce_work.py"), "300"};
  std::vector<double> alone, beside;
  int reports = 0, unanswered = 0;
  for (int r = 0; r < runs; ++r) {
    const auto plain = cluster.muster(job, 600);
    alone.push_back(work_seconds(plain.out));
    std::atomic<bool> done{false};
    std::thread asker([&] {
      while (!done) {
        const auto t0 = std::chrono::steady_clock::now();
        const auto report = cluster.muster({"stacks"}, 60);
        // Before the ranks start and after they end there is no job to ask, and those asks
        // fail as one that could not read the job would: both are counted as unanswered.
        ++(report.exit_code == 0 ? reports : unanswered);
        std::this_thread::sleep_until(t0 + std::chrono::seconds(1));
      }
    });
    const auto watched = cluster.muster(job, 600);
    done = true;
    asker.join();
    beside.push_back(work_seconds(watched.out));
    if (alone.back() < 0 || beside.back() < 0) {
      std::fprintf(stderr, "stacks_bench: the job failed (exits %d, %d):\n%s%s\n", plain.exit_code,
                   watched.exit_code, plain.err.c_str(), watched.err.c_str());
      return 1;
    }
  }
  std::sort(alone.begin(), alone.end());
  std::sort(beside.begin(), beside.end());
  const double a = alone[alone.size() / 2], b = beside[beside.size() / 2];
  std::printf("\n8 torch Gloo ranks over 4 hosts, 300 all-reduces of 1 MiB (median of %d)\n", runs);
  std::printf("%-28s %10s %10s %8s\n", "", "alone s", "stacks s", "ratio");
  std::printf("%-28s %10.3f %10.3f %8.2f\n", "muster stacks every second", a, b, b / a);
  std::printf("(%d reports taken, %d asks unanswered, before the ranks started or after they ended or failed; "
              "runs alone %.3f..%.3f s, beside %.3f..%.3f s)\n",
              reports, unanswered, alone.front(), alone.back(), beside.front(), beside.back());
  return 0;
}

// Part 3: the report at 64 ranks, every one asleep in Python.
int at_sixty_four_ranks(int runs) {
  TestCluster cluster(16);
  const std::string file = cluster.write_cluster_file("launch:\n  slots: 4\n");
  RunningCommand job(cluster.muster_argv(
      {"run", "-f", file, "--timeout", "1800", "--", "/usr/bin/python3", "-c",
       "import time; print('in place', flush=True); time.sleep(100000)"}));
  if (!ready_to_measure(cluster, job, 64, "all 64 ranks")) return 1;
  auto m = median(cluster.muster_argv({"stacks"}), runs);
  std::printf("\n64 Python ranks over 16 hosts x 4 slots (median of %d)\n", runs);
  std::printf("%-8s %10s\n", "", "muster s");
  std::printf("%-8s %10.3f  (exit %d; goal: within 2 s)\n", "wall", m.seconds, m.status);
  job.signal(SIGINT);
  job.wait(std::chrono::seconds(60));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string why = TestCluster::unavailable_reason();
  if (why.empty() && access("/usr/bin/gdb", X_OK) != 0) why = "needs gdb (the peer)";
  if (!why.empty()) {
    std::fprintf(stderr, "stacks_bench: %s\n", why.c_str());
    return 2;
  }
  const int runs = argc > 1 ? std::atoi(argv[1]) : 5;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (int status = against_gdb(runs)) return status;
  if (int status = cost_to_a_job(runs)) return status;
  return at_sixty_four_ranks(runs);
}
