// Benchmark (not a test): how muster's head grows with the cluster. On 4, 8, 16, 32 and 64 test hosts
// (or the counts given), in one run: `exec -- true` (the SSH floor: one connection and one
// command per node), `run -f -- true` (one rank per node), `ping -f` and `doctor -f`, and the
// first `run`, which ships the bundle to every node. Prints
// median wall time, the ratio to exec on the same hosts, the head's CPU time and peak memory,
// and the SSH connections each node accepted per command. Needs root.
// Run: build/tests/bench/scale_bench [RUNS [HOSTS...]]
// With MUSTER_BENCH_HOLD=1 it only brings up the first cluster and holds it (see below).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tests/bench/measure.h"
#include "tests/support/test_cluster.h"

using muster::bench::Measurement;
using muster::bench::measure;
using muster::bench::median;
using muster::testing::HostSetup;
using muster::testing::TestCluster;

int main(int argc, char** argv) {
  std::string why = TestCluster::unavailable_reason();
  if (!why.empty()) {
    std::fprintf(stderr, "scale_bench: %s\n", why.c_str());
    return 2;
  }
  const int runs = argc > 1 ? std::atoi(argv[1]) : 3;
  std::vector<int> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {4, 8, 16, 32, 64};

  std::printf("%-6s %-8s %9s %9s %9s %11s %10s %12s\n", "hosts", "command", "wall s", "/exec",
              "cpu s", "peak MiB", "conn/node", "machine cpu");
  for (int n : sizes) {
    TestCluster cluster(n);
    const std::string file = cluster.write_cluster_file();
    // Every node gets a home of its own, empty as a fresh node's, so the first run ships
    // muster's bundle to each of them; every command below finds it cached, as on a second
    // launch.
    HostSetup fresh;
    fresh.own_cache = true;
    for (int i = 0; i < n; ++i) cluster.set_up_host(i, fresh);
    if (std::getenv("MUSTER_BENCH_HOLD")) {
      // For profiling by hand (perf record -a): the cluster, its homes still empty, stays up
      // until a line or end of input arrives; commands reach it from the head's namespace.
      std::string head;
      for (const auto& word : cluster.head_argv({})) head += word + " ";
      std::printf("cluster file %s; run commands as: %sbuild/muster ...\n", file.c_str(), head.c_str());
      std::fflush(stdout);
      char line[8];
      (void)!std::fgets(line, sizeof line, stdin);
      return 0;
    }
    const Measurement first_ship = measure(cluster.muster_argv({"run", "-f", file, "--", "true"}));
    auto connections = [&] {
      int total = 0;
      for (int i = 0; i < n; ++i) total += cluster.accepted_connections(i);
      return total;
    };
    struct Row {
      const char* name;
      std::vector<std::string> args;
    };
    const Row rows[] = {
        {"exec", {"exec", "-f", file, "--", "true"}},
        {"run", {"run", "-f", file, "--", "true"}},
        {"ping", {"ping", "-f", file}},
        {"doctor", {"doctor", "-f", file}},
    };
    double exec_s = 0;
    for (const auto& row : rows) {
      const int before = connections();
      Measurement m = median(cluster.muster_argv(row.args), runs);
      const double per_node = double(connections() - before) / runs / n;
      if (std::string(row.name) == "exec") exec_s = m.seconds;
      std::printf("%-6d %-8s %9.3f %9.2f %9.3f %11.1f %10.1f %12.3f%s\n", n, row.name, m.seconds,
                  m.seconds / exec_s, m.cpu_seconds, double(m.peak_kib) / 1024, per_node,
                  m.machine_cpu_seconds,
                  m.status ? fmt::format("  (exit {})", m.status).c_str() : "");
    }
    std::printf("%-6d %-8s %9.3f %9.2f %9.3f %11.1f %10s %12.3f  (the first run, which ships; once)%s\n", n,
                "ship", first_ship.seconds, first_ship.seconds / exec_s, first_ship.cpu_seconds,
                double(first_ship.peak_kib) / 1024, "", first_ship.machine_cpu_seconds,
                first_ship.status ? fmt::format("  (exit {})", first_ship.status).c_str() : "");
  }
  std::printf("median of %d runs each; cpu and peak memory are the head's (muster on the "
              "head, not the agents);\nmachine cpu is every process's busy time on this machine during the "
              "command (the test hosts share its cores; niced work left out)\n", runs);
  return 0;
}
