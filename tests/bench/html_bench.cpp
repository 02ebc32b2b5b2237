// The HTML page's size and the time to draw it, against writing the same report as JSON
// (what --json already costs), at 16, 64 and 512 nodes: a ping --bandwidth report of every
// ordered pair (the shape ping --json prints) and a doctor report's checks, 21 per node,
// synthesised here, with one slow node. Goals (issue #46): at most 2 MB at 64 nodes and 5 MB
// at 512, written in under 100 ms at 512.
#include <chrono>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/html/html_report.h"
#include "launcher/text_bytes.h"

using json = nlohmann::json;

json doctor_report(size_t n) {
  json nodes = json::array(), pairs = json::array(), checks = json::array();
  auto host = [](size_t i) { return fmt::format("gpu-node-{:03}", i); };
  for (size_t i = 0; i < n; ++i) nodes.push_back({{"host", host(i)}});
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (i != j) {
        const bool slow = i == 5 || j == 5;
        pairs.push_back({{"src", host(i)}, {"dst", host(j)}, {"address", "10.0.0.1"}, {"interface", "eth0"},
                         {"reachable", true},
                         {"rtt_us", {{"min", 30.5}, {"median", 41.2 + double((i * 7 + j) % 13)}, {"p99", 60.1}, {"samples", 20}}},
                         {"attempts", 1}, {"bandwidth_gbps", slow ? 0.029 : 11.3 + double((i + j) % 5) / 10}});
      }
  for (size_t i = 0; i < n; ++i)
    for (int c = 0; c < 21; ++c)
      checks.push_back({{"stage", c < 3 ? "network" : "health"}, {"name", fmt::format("check_{}", c)},
                        {"node", host(i)}, {"status", i == 5 && c == 0 ? "fail" : "pass"},
                        {"reason", "a reason of a few words, as checks give them"}});
  json problems = {{{"severity", "fail"}, {"check", "bandwidth"}, {"node", host(5)}, {"message", "slow"}}};
  return {{"schema", "muster-doctor/1"}, {"muster_version", "bench"}, {"cluster", "bench"}, {"status", "fail"},
          {"duration_s", 1.0}, {"stages", json::array()}, {"checks", checks},
          {"network", {{"nodes", nodes}, {"pairs", pairs}, {"problems", problems}}}};
}

int main(int argc, char** argv) {
  // `html_bench profile`: the page at 512 nodes alone, for a profiler.
  if (argc > 1 && std::string(argv[1]) == "profile") {
    const json report = doctor_report(512);
    size_t bytes = 0;
    for (int k = 0; k < 5; ++k) bytes += muster::cli::html_report(report, "doctor").size();
    return bytes == 0;
  }
  std::printf("%6s %12s %12s %12s %12s %8s\n", "nodes", "html bytes", "html ms", "json bytes", "json ms", "ratio");
  for (size_t n : {16, 64, 512}) {
    const json report = doctor_report(n);
    using Clock = std::chrono::steady_clock;
    auto best = [&](auto&& write, size_t& bytes) {
      double fastest = 1e9;
      for (int k = 0; k < 5; ++k) {
        const auto t = Clock::now();
        bytes = write().size();
        fastest = std::min(fastest, std::chrono::duration<double, std::milli>(Clock::now() - t).count());
      }
      return fastest;
    };
    size_t html_bytes = 0, json_bytes = 0;
    const double html_ms = best([&] { return muster::cli::html_report(report, "doctor"); }, html_bytes);
    const double json_ms = best([&] { return muster::report_json_text(report, 2); }, json_bytes);
    std::printf("%6zu %12zu %12.1f %12zu %12.1f %8.2f\n", n, html_bytes, html_ms, json_bytes, json_ms, html_ms / json_ms);
  }
  return 0;
}
