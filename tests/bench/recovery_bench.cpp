// Benchmark (not a test): how long `muster run --restarts` takes to recover from a lost node
// at 4 and 16 test hosts (plus one spare), against a fresh `muster run -- true` on the same
// hosts, measured in one run. One node's route to the head is cut while its ranks run; the
// head takes it for lost after --heartbeat-timeout 3 s, leaves it out and starts its ranks on
// the spare. Prints the recovery muster reports (from the loss detected to every rank running
// again), the time from the cut to every rank of the second attempt having started (which
// includes the heartbeat timeout), and the recovery's ratio to a fresh launch. Needs root (it
// builds the test cluster). Run: build/tests/bench/recovery_bench [RUNS]
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/bench/measure.h"
#include "tests/support/command_runner.h"
#include "tests/support/test_cluster.h"

using muster::testing::RunningCommand;
using muster::testing::TempDir;
using muster::testing::TestCluster;

namespace {

using Clock = std::chrono::steady_clock;

size_t files_with_prefix(const std::string& dir, const std::string& prefix) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.path().filename().string().rfind(prefix, 0) == 0;
  return n;
}

struct Recovery {
  double reported_s = -1;   // the timeline's seconds_to_running
  double cut_to_ranks_s = -1;
  int status = -1;
};

Recovery recover_once(TestCluster& cluster, const std::string& file, int n) {
  TempDir dir;
  const std::string head_address = cluster.address(0).substr(0, cluster.address(0).rfind('.')) + ".254";
  const std::string rank_command = fmt::format(
      "touch {}/att.$MUSTER_RESTART_COUNT.$RANK; if [ $MUSTER_RESTART_COUNT = 1 ]; then exit 0; fi; sleep 120", dir.path());
  RunningCommand head(cluster.muster_argv({"run", "-f", file, "--spares", "1", "--restarts", "1",
                                           "--heartbeat-timeout", "3", "--grace", "1", "--json", "--", "sh", "-c",
                                           rank_command}));
  Recovery r;
  if (!muster::testing::wait_until([&] { return files_with_prefix(dir.path(), "att.0.") == size_t(n); },
                                   std::chrono::milliseconds(120000)))
    return r;
  cluster.on_host(1, {"ip", "route", "add", "blackhole", head_address + "/32"});
  const auto cut = Clock::now();
  muster::testing::wait_until([&] { return files_with_prefix(dir.path(), "att.1.") == size_t(n); },
                              std::chrono::milliseconds(120000));
  r.cut_to_ranks_s = std::chrono::duration<double>(Clock::now() - cut).count();
  auto result = head.wait(std::chrono::seconds(120));
  cluster.on_host(1, {"ip", "route", "del", "blackhole", head_address + "/32"});
  r.status = result.exit_code;
  const std::string out = result.out;
  const size_t at = out.rfind("{\"events\"");
  if (at != std::string::npos) {
    auto j = nlohmann::json::parse(out.substr(at), nullptr, false);
    if (j.is_object() && j["events"].is_array() && !j["events"].empty() && j["events"][0]["seconds_to_running"].is_number())
      r.reported_s = j["events"][0]["seconds_to_running"].get<double>();
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string why = TestCluster::unavailable_reason();
  if (!why.empty()) {
    std::fprintf(stderr, "recovery_bench: %s\n", why.c_str());
    return 2;
  }
  const int runs = argc > 1 ? std::atoi(argv[1]) : 3;
  std::printf("%-6s %14s %16s %14s %18s\n", "hosts", "recovery s", "cut->ranks s", "fresh run s", "recovery/fresh");
  for (int n : {4, 16}) {
    TestCluster cluster(n + 1);
    const std::string file = cluster.write_cluster_file("launch:\n  slots: 1\n");
    std::vector<double> recovered, cut_to_ranks;
    int bad = 0;
    for (int i = 0; i < runs; ++i) {
      Recovery r = recover_once(cluster, file, n);
      if (r.status != 0 || r.reported_s < 0) ++bad;
      else recovered.push_back(r.reported_s), cut_to_ranks.push_back(r.cut_to_ranks_s);
    }
    auto fresh = muster::bench::median(cluster.muster_argv({"run", "-f", file, "--spares", "1", "--", "true"}), runs);
    auto med = [](std::vector<double> v) {
      if (v.empty()) return -1.0;
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf("%-6d %14.3f %16.3f %14.3f %18.2f\n", n, med(recovered), med(cut_to_ranks), fresh.seconds,
                med(recovered) / fresh.seconds);
    if (bad || fresh.status) std::printf("       (%d recoveries failed; fresh run exit %d)\n", bad, fresh.status);
  }
  std::printf("median of %d runs each; heartbeat timeout 3 s, so cut->ranks is at least 3 s\n", runs);
  return 0;
}
