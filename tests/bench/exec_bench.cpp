// Benchmark (not a test): `muster exec -- true` against pdsh and clush on the same 8 and 16
// test hosts, measured in one run. Prints each median wall time, the ratios, and muster's
// peak memory. Needs root (it builds the test cluster). Run: build/tests/bench/exec_bench [RUNS]
#include <sys/resource.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tests/support/test_cluster.h"

using muster::testing::TestCluster;

namespace {

struct Measurement {
  double seconds = 0;
  long peak_kib = 0;
  int status = 0;
};

Measurement measure(const std::vector<std::string>& argv) {
  std::fflush(stdout);  // or the child would print our buffered table again
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> c;
    for (const auto& a : argv) c.push_back(const_cast<char*>(a.c_str()));
    c.push_back(nullptr);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDOUT_FILENO);
    dup2(devnull, STDERR_FILENO);
    execvp(c[0], c.data());
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  Measurement m;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.peak_kib = usage.ru_maxrss;
  m.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return m;
}

Measurement median(const std::vector<std::string>& argv, int runs) {
  std::vector<Measurement> all;
  for (int i = 0; i < runs; ++i) all.push_back(measure(argv));
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.seconds < b.seconds; });
  Measurement m = all[all.size() / 2];
  for (const auto& x : all) m.peak_kib = std::max(m.peak_kib, x.peak_kib);
  return m;
}

}  // namespace

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
    std::vector<std::string> head = cluster.muster_argv({});
    head.resize(4);  // "ip netns exec HEAD"
    auto in_head = [&](std::vector<std::string> cmd) {
      std::vector<std::string> all = head;
      all.insert(all.end(), cmd.begin(), cmd.end());
      return all;
    };
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
