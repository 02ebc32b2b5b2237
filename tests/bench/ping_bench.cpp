// Benchmark (not a test): the median RTT `muster ping` measures between two test hosts
// against qperf's tcp_lat on the same pair, in one run; the bandwidth `ping --bandwidth`
// measures on 4 hosts with one host's link capped at 30 Mbit/s both ways, against qperf's
// tcp_bw on a healthy pair and a capped one, and the wall time of --bandwidth (every pair)
// and --search (the pair search) with what each named, and of smoke --pairs (the search over
// ranks' all-reduces); then the wall time of a whole
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
  {
    TestCluster cluster(4);
    cluster.cap_host(3, "30mbit");
    RunningCommand server2(cluster.host_argv(1, {"qperf"}));
    RunningCommand server4(cluster.host_argv(3, {"qperf"}));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    // qperf's tcp_bw in Gbit/s (it prints bytes: "bw = 1.9 GB/sec").
    auto qperf_gbps = [&](int from, int to) {
      auto r = cluster.on_host(from, {"qperf", "-t", "2", cluster.address(to), "tcp_bw"});
      double value = 0;
      std::string unit;
      auto at = r.out.find("bw");
      if (at == std::string::npos) return 0.0;
      std::istringstream in(r.out.substr(r.out.find('=', at) + 1));
      in >> value >> unit;
      const double scale = unit == "GB/sec" ? 8 : unit == "MB/sec" ? 8e-3 : unit == "KB/sec" ? 8e-6 : 0;
      return value * scale;
    };
    auto timed = [&](const std::vector<std::string>& extra, nlohmann::json& report) {
      std::vector<std::string> args = {"ping", "-f", cluster.write_cluster_file(), "--json"};
      args.insert(args.end(), extra.begin(), extra.end());
      auto start = std::chrono::steady_clock::now();
      auto r = cluster.muster(args, 600);
      report = r.out.empty() ? nlohmann::json() : nlohmann::json::parse(r.out);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    auto named = [](const nlohmann::json& report) {
      std::string out;
      for (const auto& p : report["problems"])
        if (p["check"] == "bandwidth") out += p["message"].get<std::string>().substr(0, 60) + "...; ";
      return out.empty() ? std::string("nothing") : out;
    };
    std::printf("4 hosts, node4 capped at 30 Mbit/s both ways (Gbit/s)\n");
    std::printf("%-22s %12s %12s %8s\n", "pair", "muster", "qperf", "ratio");
    nlohmann::json mesh, search;
    const double mesh_s = timed({"--bandwidth"}, mesh);
    for (auto [from, to] : {std::pair(0, 1), std::pair(0, 3)}) {
      double muster_gbps = 0;
      for (const auto& p : mesh["pairs"])
        if (p["src"] == cluster.host(from) && p["dst"] == cluster.host(to) && p.contains("bandwidth_gbps"))
          muster_gbps = p["bandwidth_gbps"];
      const double q = qperf_gbps(from, to);
      std::printf("%-22s %12.3f %12.3f %8.2f\n", fmt::format("{} -> {}", cluster.host(from), cluster.host(to)).c_str(),
                  muster_gbps, q, q > 0 ? muster_gbps / q : 0.0);
    }
    const double search_s = timed({"--search"}, search);
    std::printf("ping --bandwidth: %.2f s, named: %s\n", mesh_s, named(mesh).c_str());
    std::printf("ping --search:    %.2f s, %d rounds, named: %s\n", search_s,
                search["search"].is_null() ? 0 : search["search"]["rounds"].get<int>(), named(search).c_str());
    std::printf("(muster: a 300 ms stream per pair; qperf: tcp_bw over 2 s)\n");
    // The same search over real ranks: an all-reduce of 4 MiB per pair, within 2 s a round.
    nlohmann::json smoke;
    auto start = std::chrono::steady_clock::now();
    auto r = cluster.muster({"smoke", "-f", cluster.write_cluster_file(), "--pairs", "--min-bytes", "4M",
                             "--max-bytes", "4M", "--iters", "2", "--warmup", "0", "--json"}, 600);
    const double smoke_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!r.out.empty()) smoke = nlohmann::json::parse(r.out);
    std::string smoke_named;
    for (const auto& p : smoke["problems"]) smoke_named += p["message"].get<std::string>().substr(0, 60) + "...; ";
    std::printf("smoke --pairs 4M: %.2f s, %d rounds, named: %s\n\n", smoke_s,
                smoke["pair_search"].is_null() ? 0 : smoke["pair_search"]["rounds"].get<int>(),
                smoke_named.empty() ? "nothing" : smoke_named.c_str());
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
