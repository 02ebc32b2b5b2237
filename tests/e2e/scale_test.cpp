// Past 16 nodes: 64 healthy test hosts on one bridge, sharing this machine's two cores, must
// pass as 4 do. run, smoke (64 ranks over Gloo) and doctor exit 0; ping measures every one of
// the 4032 ordered pairs. Times are printed beside exec's on the same cluster, never judged:
// tests/bench/ping_bench.cpp is where ping's speed is measured.
#include <chrono>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/test_cluster.h"

namespace muster::testing {
namespace {

struct Timed {
  CommandResult result;
  double seconds = 0;
};

TEST(ScaleCluster, SixtyFourHealthyHostsPassRunSmokeDoctorAndPing) {
  MUSTER_REQUIRE_TEST_CLUSTER();
  constexpr int kHosts = 64;
  TestCluster cluster(kHosts);
  const std::string file = cluster.write_cluster_file();
  auto timed = [&](std::vector<std::string> args) {
    const auto start = std::chrono::steady_clock::now();
    Timed t{cluster.muster(args, 600), 0};
    t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%-40s exit %d in %.1f s\n", fmt::format("{}", fmt::join(args, " ")).substr(0, 40).c_str(),
                t.result.exit_code, t.seconds);
    return t;
  };
  const Timed exec = timed({"exec", "-f", file, "--", "true"});
  EXPECT_EQ(exec.result.exit_code, 0) << exec.result.err;
  const Timed run = timed({"run", "-f", file, "--", "true"});
  EXPECT_EQ(run.result.exit_code, 0) << run.result.err;
  // 64 ranks on two cores take about 1 s per small all-reduce: a few iterations prove the
  // world works; tests/bench/ measures speed.
  const Timed smoke = timed({"smoke", "-f", file, "--max-bytes", "8", "--iters", "2", "--warmup", "1"});
  EXPECT_EQ(smoke.result.exit_code, 0) << smoke.result.out << smoke.result.err;
  TempDir dir;
  const Timed doctor = timed({"doctor", "-f", file, "--json", dir.file("doctor.json")});
  EXPECT_EQ(doctor.result.exit_code, 0) << doctor.result.out << doctor.result.err;
  // The table fits one screen: identical rows fold into one with their host list (1,361
  // lines before they did); the JSON keeps every node's checks.
  EXPECT_LE(doctor.result.out_lines().size(), 100u) << doctor.result.out;
  std::printf("doctor's table: %zu lines\n", doctor.result.out_lines().size());
  if (std::filesystem::exists(dir.file("doctor.json"))) {
    const auto report = nlohmann::json::parse(std::ifstream(dir.file("doctor.json")));
    size_t reached = 0;
    for (const auto& c : report["checks"]) reached += c["stage"] == "ssh" && c["name"] == "reach";
    EXPECT_EQ(reached, size_t(kHosts));
  }
  const Timed ping = timed({"ping", "-f", file, "--json"});
  EXPECT_EQ(ping.result.exit_code, 0) << ping.result.err;
  if (!ping.result.out.empty()) {
    const auto report = nlohmann::json::parse(ping.result.out);
    EXPECT_EQ(report["pairs"].size(), size_t(kHosts * (kHosts - 1)));
    for (const auto& p : report["problems"]) ADD_FAILURE() << p.dump();
  }
  std::printf("ping at %d hosts took %.1fx exec's time (%.1f s against %.1f s)\n", kHosts,
              ping.seconds / exec.seconds, ping.seconds, exec.seconds);
}

}  // namespace
}  // namespace muster::testing
