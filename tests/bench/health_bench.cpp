// Benchmark (not a test): what the health checks cost. `muster health` on this machine against
// `muster --version` (the floor: the same process started and ended), and on 16 test hosts
// (or the counts given) `doctor -f` against `doctor -f --skip health`, in one run, their runs
// interleaved so that the machine's drift falls on both alike. Prints medians and the
// difference. Needs root for the test cluster.
// Run: build/tests/bench/health_bench [RUNS [HOSTS...]]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/bench/measure.h"
#include "tests/support/build_paths.h"
#include "tests/support/test_cluster.h"

using muster::testing::muster_binary;

using muster::bench::Measurement;
using muster::bench::measure;
using muster::testing::TestCluster;

namespace {

// Runs each command `runs` times, one after the other in turn; the median of each.
std::vector<Measurement> interleaved(const std::vector<std::vector<std::string>>& commands, int runs) {
  std::vector<std::vector<Measurement>> all(commands.size());
  for (int r = 0; r < runs; ++r)
    for (size_t c = 0; c < commands.size(); ++c) all[c].push_back(measure(commands[c]));
  std::vector<Measurement> out;
  for (auto& m : all) {
    std::sort(m.begin(), m.end(), [](auto& a, auto& b) { return a.seconds < b.seconds; });
    out.push_back(m[m.size() / 2]);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::vector<int> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {16};

  auto local = interleaved({{muster_binary(), "health"}, {muster_binary(), "--version"}}, std::max(runs, 11));
  std::printf("this machine, median of %d:\n", std::max(runs, 11));
  std::printf("  muster health      %7.1f ms wall, %6.1f ms cpu (exit %d)\n", local[0].seconds * 1e3,
              local[0].cpu_seconds * 1e3, local[0].status);
  std::printf("  muster --version   %7.1f ms wall, %6.1f ms cpu (the process's start and end)\n",
              local[1].seconds * 1e3, local[1].cpu_seconds * 1e3);
  std::printf("  the checks alone   %7.1f ms\n\n", (local[0].seconds - local[1].seconds) * 1e3);

  std::string why = TestCluster::unavailable_reason();
  if (!why.empty()) {
    std::fprintf(stderr, "health_bench: no test cluster: %s\n", why.c_str());
    return 2;
  }
  std::printf("%-6s %-26s %9s %9s %9s\n", "hosts", "command", "wall s", "cpu s", "exit");
  for (int n : sizes) {
    TestCluster cluster(n);
    const std::string file = cluster.write_cluster_file();
    (void)measure(cluster.muster_argv({"run", "-f", file, "--", "true"}));  // ships the bundle once
    auto m = interleaved({cluster.muster_argv({"doctor", "-f", file}),
                          cluster.muster_argv({"doctor", "-f", file, "--skip", "health"})},
                         runs);
    std::printf("%-6d %-26s %9.2f %9.2f %9d\n", n, "doctor -f", m[0].seconds, m[0].cpu_seconds, m[0].status);
    std::printf("%-6d %-26s %9.2f %9.2f %9d\n", n, "doctor -f --skip health", m[1].seconds, m[1].cpu_seconds,
                m[1].status);
    std::printf("%-6d %-26s %+9.2f  (%.2fx)\n", n, "the health stage adds", m[0].seconds - m[1].seconds,
                m[0].seconds / m[1].seconds);
    // The stage's own wall time, as doctor's report gives it: the difference above is two
    // medians of noisy runs of about 3 s each.
    std::vector<double> stage;
    for (int r = 0; r < runs; ++r) {
      const std::string report = cluster.dir() + "/health_bench.json";
      const Measurement m = measure(cluster.muster_argv({"doctor", "-f", file, "--json", report}));
      std::ifstream in(report);
      if (!in) {
        std::fprintf(stderr, "health_bench: doctor (exit %d) wrote no %s\n", m.status, report.c_str());
        continue;
      }
      // Named: a range-for over parse(in)["stages"] would walk a destroyed temporary.
      auto j = nlohmann::json::parse(in);
      for (const auto& s : j["stages"])
        if (s["name"] == "health") stage.push_back(s["duration_s"].get<double>());
    }
    std::sort(stage.begin(), stage.end());
    if (!stage.empty())
      std::printf("%-6d %-26s %9.3f  (median of %zu; min %.3f, max %.3f)\n", n, "health stage, its own time",
                  stage[stage.size() / 2], stage.size(), stage.front(), stage.back());
    std::fflush(stdout);
  }
  return 0;
}
