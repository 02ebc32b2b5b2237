// Benchmark (not a test): the median RTT `muster ping` measures between two test hosts
// against qperf's tcp_lat on the same pair, in one run; then the wall time of a whole
// `muster ping` over 8 and 16 hosts. Needs root. Run: build/tests/bench/ping_bench
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/support/test_cluster.h"

using namespace muster::testing;

int main() {
  std::string why = TestCluster::unavailable_reason();
  if (!why.empty() || access("/usr/bin/qperf", X_OK) != 0) {
    std::fprintf(stderr, "ping_bench: %s\n", why.empty() ? "needs qperf (apt-get install qperf)" : why.c_str());
    return 2;
  }
  {
    TestCluster cluster(2);
    RunningCommand server(cluster.host_argv(1, {"qperf"}));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::printf("%-28s %12s %12s %8s\n", "pair node1 -> node2", "muster us", "qperf us", "ratio");
    for (int round = 0; round < 3; ++round) {
      auto ping = cluster.muster({"ping", "-f", cluster.write_cluster_file(), "--json", "--count", "1000"});
      auto report = nlohmann::json::parse(ping.out);
      double muster_rtt = report["pairs"][0]["rtt_us"]["median"];
      // qperf reports one-way latency: half a round trip.
      auto qperf = cluster.on_host(0, {"qperf", "-t", "2", cluster.address(1), "tcp_lat"});
      double one_way = 0;
      std::string unit;
      auto at = qperf.out.find("latency");
      if (at != std::string::npos) {
        std::istringstream in(qperf.out.substr(qperf.out.find('=', at) + 1));
        in >> one_way >> unit;
        if (unit == "ms") one_way *= 1000;
        if (unit == "ns") one_way /= 1000;
      }
      std::printf("%-28s %12.1f %12.1f %8.2f\n", fmt::format("round {}", round + 1).c_str(),
                  muster_rtt, 2 * one_way, one_way > 0 ? muster_rtt / (2 * one_way) : 0.0);
    }
    std::printf("(muster: median of 1000 one-byte round trips; qperf: 2 x tcp_lat over 2 s)\n\n");
  }
  std::printf("%-8s %14s %10s\n", "hosts", "ordered pairs", "ping s");
  for (int n : {8, 16}) {
    TestCluster cluster(n);
    auto start = std::chrono::steady_clock::now();
    auto ping = cluster.muster({"ping", "-f", cluster.write_cluster_file(), "--json"}, 600);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%-8d %14d %10.2f%s\n", n, n * (n - 1), seconds,
                ping.exit_code == 0 ? "" : fmt::format("  (exit {})", ping.exit_code).c_str());
  }
  std::printf("(default --count 50, wall time of the whole command including SSH)\n");
  return 0;
}
