// Benchmark (not a test): the network probe's analysis (choosing MASTER_ADDR and every node's
// interface, and finding problems) and the rank plan, for simulated clusters of 1000 and 4000
// nodes: every node with two addresses (eth0, probed by all its peers, and ib0, never
// reached), the all-pairs probes a real `muster ping` records, with RTTs around 30 us.
// Prints the time of each step; the goal is under 1 s at 1000 nodes.
// Usage: build/tests/bench/network_scale_bench [NODES...]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "launcher/cluster/rank_plan.h"
#include "launcher/job/cluster_ping.h"
#include "launcher/job/network_verdicts.h"

using namespace muster;
using Clock = std::chrono::steady_clock;

namespace {

std::string address(int subnet, int node) {
  return fmt::format("{}.{}.{}.{}", subnet, 1 + node / 65536 % 200, node / 256 % 256, node % 256);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

long peak_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::stoi(argv[i]));
  if (sizes.empty()) sizes = {1000, 4000};
  fmt::print("{:>6} {:>12} {:>14} {:>12} {:>12} {:>10}\n", "nodes", "probes", "analysis s",
             "rank plan s", "ranks", "peak MiB");
  for (int n : sizes) {
    ClusterSpec cluster;
    cluster.checks.max_rtt_ms = 1.0;
    PingReport report;
    for (int i = 0; i < n; ++i) {
      NodeSpec node;
      node.host = fmt::format("gpu{:05}", i);
      node.address = address(10, i);
      node.slots.fixed = 8;
      cluster.nodes.push_back(node);
      NodeHello hello;
      hello.hostname = node.host;
      hello.machine_id = fmt::format("{:032x}", i);
      hello.boot_id = fmt::format("b{:031x}", i);
      hello.gpus = 8;
      hello.gpu_models = std::vector<std::string>(8, "NVIDIA H100 80GB HBM3");
      hello.cpus = 192;
      hello.kernel = "6.1.0-13-amd64";
      hello.addresses = {{"ib0", address(192, i), 8}, {"eth0", address(10, i), 8}};
      NodeStatus status;
      status.host = node.host;
      status.address = node.address;
      status.reach.ok = true;
      status.clock_offset_ms = 0.01 * (i % 7);
      status.facts = hello;
      report.nodes.push_back(std::move(status));
    }
    report.pairs.reserve(size_t(n) * size_t(n - 1));
    for (int src = 0; src < n; ++src)
      for (int dst = 0; dst < n; ++dst) {
        if (src == dst) continue;
        PairProbe p;
        p.src = src;
        p.dst = dst;
        p.address = address(10, dst);
        p.interface = "eth0";
        p.result.reachable = true;
        p.result.rtt.median_us = 25 + (src * 7 + dst * 13) % 11;
        report.pairs.push_back(std::move(p));
      }
    auto start = Clock::now();
    analyze_probes(cluster, report);
    const double analysis = seconds_since(start);
    if (!report.choice.master_addr || int(report.choice.interface_of.size()) != n) {
      fmt::print(stderr, "the analysis chose no network for {} nodes\n", n);
      return 1;
    }
    start = Clock::now();
    RankPlan plan = make_rank_plan(cluster, std::nullopt, MapBy::Slot);
    const double planning = seconds_since(start);
    fmt::print("{:>6} {:>12} {:>14.3f} {:>12.3f} {:>12} {:>10}\n", n, report.pairs.size(), analysis,
               planning, plan.world_size(), peak_mib());
    std::fflush(stdout);
  }
  fmt::print("(one run each; MASTER_ADDR {} chosen with eth0 on every node)\n", address(10, 0));
}
