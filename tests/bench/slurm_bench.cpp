// Benchmark (not a test): inside one 4-node allocation of a real Slurm (the test cluster's
// slurmctld and slurmd), `muster run -- true` and `muster exec -- true` (one srun step, no
// agents) against `srun -N4 true`, alternating, measured in one run. Prints each median wall
// time and the ratios. Needs root and slurm-wlm, munge.
// Run: build/tests/bench/slurm_bench [ROUNDS]
// With MUSTER_BENCH_SCRIPT set, that shell script runs inside the allocation instead (with
// $MUSTER the binary under test) and its output is printed: for timing one stage by hand.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tests/support/build_paths.h"
#include "tests/support/slurm_cluster.h"

using muster::testing::muster_binary;
using muster::testing::SlurmCluster;

int main(int argc, char** argv) {
  std::string why = SlurmCluster::unavailable_reason();
  if (!why.empty()) {
    std::fprintf(stderr, "slurm_bench: %s\n", why.c_str());
    return 2;
  }
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 10;
  SlurmCluster slurm(4);
  // One allocation for every round, so that neither side pays for the allocation itself.
  const std::string script = fmt::format(
      "t() {{ s=$(date +%s.%N); \"$@\" >/dev/null 2>&1; st=$?; e=$(date +%s.%N); echo \"$(echo \"$e - $s\" | bc) $st\"; }}; "
      "for i in $(seq {0}); do printf 'run '; t {1} run -- true; printf 'exec '; t {1} exec -- true; "
      "printf 'srun '; t srun -N4 true; done",
      rounds, muster_binary());
  if (const char* by_hand = std::getenv("MUSTER_BENCH_SCRIPT")) {
    auto r = slurm.run({"salloc", "-N4", "--quiet", "env", std::string("MUSTER=") + muster_binary(), "sh", "-c", by_hand}, 600);
    std::printf("%s%s", r.out.c_str(), r.err.c_str());
    return r.exit_code;
  }
  auto r = slurm.run({"salloc", "-N4", "--quiet", "sh", "-c", script}, 600);
  std::map<std::string, std::vector<double>> times;
  std::istringstream in(r.out);
  std::string tool;
  double seconds;
  int status;
  while (in >> tool >> seconds >> status) {
    if (status != 0) std::printf("(%s exited %d in one round)\n", tool.c_str(), status);
    times[tool].push_back(seconds);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  const double run = median(times["run"]), exec = median(times["exec"]), s = median(times["srun"]);
  std::printf("%-28s %10s\n", "inside a 4-node allocation", "median s");
  std::printf("%-28s %10.3f\n", "muster run -- true", run);
  std::printf("%-28s %10.3f\n", "muster exec -- true", exec);
  std::printf("%-28s %10.3f\n", "srun -N4 true", s);
  std::printf("%-28s %10.2f\n", "muster run / srun", s > 0 ? run / s : 0);
  std::printf("%-28s %10.2f\n", "muster exec / srun", s > 0 ? exec / s : 0);
  std::printf("%d rounds, alternating, one allocation\n", rounds);
  return r.exit_code == 0 ? 0 : 1;
}
