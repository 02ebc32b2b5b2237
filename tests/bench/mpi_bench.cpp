// Benchmark (not a test): an 8-rank mpi4py program over 4 test hosts x 2 slots, started by
// `muster run` and by Open MPI's own `mpirun --hostfile` over SSH, in one run: the wall time
// of a hello-and-Allreduce (median of RUNS each), and an Allreduce sweep under each (both use
// Open MPI's TCP transport once started); and what serving MPI costs 8 ranks of `true`. Needs root and Debian's openmpi-bin and
// python3-mpi4py. Run: build/tests/bench/mpi_bench [RUNS]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tests/bench/measure.h"
#include "tests/support/build_paths.h"
#include "tests/support/test_cluster.h"

using muster::testing::source_dir;

using muster::bench::median;
using muster::testing::TestCluster;

namespace {

// "BYTES SECONDS" lines of the sweep, by size.
std::map<long, double> sweep_of(const std::string& out) {
  std::map<long, double> by_size;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    long bytes = 0;
    double seconds = 0;
    if (std::sscanf(line.c_str(), "%ld %lf", &bytes, &seconds) == 2 && seconds > 0) by_size[bytes] = seconds;
  }
  return by_size;
}

}  // namespace

int main(int argc, char** argv) {
  std::string why = TestCluster::unavailable_reason();
  if (why.empty() && access("/usr/bin/mpirun.openmpi", X_OK) != 0) why = "needs openmpi-bin";
  if (!why.empty()) {
    std::fprintf(stderr, "mpi_bench: %s\n", why.c_str());
    return 2;
  }
  const int runs = argc > 1 ? std::atoi(argv[1]) : 5;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each table as it is measured, into a file too
  TestCluster cluster(4);
  const std::string file = cluster.write_cluster_file("launch:\n  slots: 2\n");
  const std::string hostfile = cluster.dir() + "/mpi_hosts";
  {
    std::string text;
    for (int i = 0; i < cluster.size(); ++i) text += cluster.address(i) + " slots=2\n";
    FILE* f = std::fopen(hostfile.c_str(), "w");
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  const std::string ssh_options = fmt::format(
      "-i {}/id_ed25519 -o UserKnownHostsFile={} -o StrictHostKeyChecking=yes -o BatchMode=yes -l root",
      cluster.dir(), cluster.known_hosts());
  const std::string source = source_dir();
  auto muster = [&](const std::string& script) {
    return cluster.muster_argv({"run", "-f", file, "--tag", "none", "--", "/usr/bin/python3", source + script});
  };
  // As an Open MPI user runs it over SSH, told the same interface muster tells it.
  auto mpirun = [&](const std::string& script) {
    return cluster.head_argv({"mpirun.openmpi", "--allow-run-as-root", "--hostfile", hostfile, "-n", "8",
                              "--mca", "plm_rsh_args", ssh_options, "--mca", "btl_tcp_if_include", "eth0",
                              "/usr/bin/python3", source + script});
  };

  const std::string hello = "/tests/e2e/mpi/mpi4py_hello.py";
  auto m = median(muster(hello), runs);
  auto o = median(mpirun(hello), runs);
  std::printf("8 ranks over 4 hosts, mpi4py hello + Allreduce (median of %d)\n", runs);
  std::printf("%-10s %10s %10s %8s\n", "", "muster s", "mpirun s", "ratio");
  std::printf("%-10s %10.3f %10.3f %8.2f\n", "wall", m.seconds, o.seconds, m.seconds / o.seconds);
  if (m.status || o.status) std::printf("(exit statuses: muster %d, mpirun %d)\n", m.status, o.status);

  // What serving MPI costs ranks that are not MPI programs: `true` with both protocols served
  // (auto) and with nothing (none).
  auto plain = [&](const char* mpi) {
    return median(cluster.muster_argv({"run", "-f", file, "--mpi", mpi, "--", "true"}), runs);
  };
  auto served = plain("auto"), bare = plain("none");
  std::printf("\n8 ranks of `true` (not MPI programs), median of %d\n", runs);
  std::printf("%-10s %10s %10s %8s\n", "", "auto s", "none s", "ratio");
  std::printf("%-10s %10.3f %10.3f %8.2f\n", "wall", served.seconds, bare.seconds, served.seconds / bare.seconds);

  const std::string sweep = "/tests/bench/mpi_allreduce_sweep.py";
  auto muster_sweep = sweep_of(muster::testing::run_command(muster(sweep), {}, std::chrono::seconds(600)).out);
  auto mpirun_sweep = sweep_of(muster::testing::run_command(mpirun(sweep), {}, std::chrono::seconds(600)).out);
  std::printf("\nAllreduce, 8 ranks (us per call; best of 3 batches)\n");
  std::printf("%-10s %12s %12s %8s\n", "bytes", "muster", "mpirun", "ratio");
  for (const auto& [bytes, seconds] : muster_sweep) {
    const auto other = mpirun_sweep.find(bytes);
    const double theirs = other == mpirun_sweep.end() ? 0 : other->second;
    std::printf("%-10ld %12.1f %12.1f %8.2f\n", bytes, seconds * 1e6, theirs * 1e6, theirs > 0 ? seconds / theirs : 0.0);
  }
  return 0;
}
