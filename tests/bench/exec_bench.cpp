// Benchmark (not a test): `muster exec -- true` against pdsh and clush on the same 8 and 16
// test hosts, measured in one run. Prints each median wall time, the ratios, and muster's
// peak memory. Needs root (it builds the test cluster). Run: build/tests/bench/exec_bench [RUNS]
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tests/bench/measure.h"
#include "tests/support/test_cluster.h"

using muster::testing::TestCluster;

using muster::bench::median;

int main(int argc, char** argv) {
  std::string why = TestCluster::unavailable_reason();
  if (!why.empty()) {
    std::fprintf(stderr, "exec_bench: %s\n", why.c_str());
    return 2;
  }
  const int runs = argc > 1 ? std::atoi(argv[1]) : 5;
  std::printf("%-6s %-8s %10s %10s %10s %12s %12s %14s\n", "hosts", "", "muster s", "pdsh s",
              "clush s", "muster/pdsh", "muster/clush", "muster peak");
  for (int n : {8, 16}) {
    TestCluster cluster(n);
    const std::string file = cluster.write_cluster_file();
    std::string hosts;
    for (int i = 0; i < n; ++i) hosts += (i ? "," : "") + cluster.address(i);
    const std::string ssh_options = fmt::format(
        "-i {}/id_ed25519 -o UserKnownHostsFile={} -o StrictHostKeyChecking=yes -o BatchMode=yes "
        "-l root", cluster.dir(), cluster.known_hosts());
    auto in_head = [&](const std::vector<std::string>& cmd) { return cluster.head_argv(cmd); };
    // Each tool at its default fanout (muster 8, pdsh 32, clush 64), as users run them.
    auto muster = median(cluster.muster_argv({"exec", "-f", file, "--", "true"}), runs);
    auto pdsh = median(in_head({"env", "PDSH_SSH_ARGS_APPEND=" + ssh_options, "pdsh", "-S", "-R",
                                "ssh", "-w", hosts, "true"}), runs);
    auto clush = median(in_head({"clush", "-S", "-o", ssh_options, "-w", hosts, "true"}), runs);
    std::printf("%-6d %-8s %10.3f %10.3f %10.3f %12.2f %12.2f %11ld KiB\n", n, "", muster.seconds,
                pdsh.seconds, clush.seconds, muster.seconds / pdsh.seconds,
                muster.seconds / clush.seconds, muster.peak_kib);
    if (muster.status || pdsh.status || clush.status)
      std::printf("       (exit statuses: muster %d, pdsh %d, clush %d)\n", muster.status,
                  pdsh.status, clush.status);
  }
  std::printf("median of %d runs each; peak memory is muster's largest resident set\n", runs);
  return 0;
}
