// MPI programs under muster with real MPI libraries from Debian as the clients: MPICH, whose
// simple PMI speaks PMI-1 over PMI_FD as under Hydra (the program is built here with
// mpicc.mpich, as a user builds one), and mpi4py over Open MPI, which asks PMIx.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "tests/support/build_paths.h"
#include "tests/support/command_runner.h"
#include "tests/support/shared_cluster.h"
#include "tests/support/test_cluster.h"

namespace muster::testing {
namespace {

class MpichLocal : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access("/usr/bin/mpicc.mpich", X_OK) != 0) {
      if (in_ci()) FAIL() << "mpicc.mpich is missing (apt-get install mpich libmpich-dev)";
      GTEST_SKIP() << "needs mpicc.mpich (apt-get install mpich libmpich-dev)";
    }
    auto built = run_command({"/usr/bin/mpicc.mpich", "-O1", "-o", program(),
                              source_path("/tests/e2e/mpi/mpi_hello.c")});
    ASSERT_EQ(built.exit_code, 0) << built.err;
  }
  std::string program() const { return dir_.file("mpi_hello"); }
  TempDir dir_;
};

TEST_F(MpichLocal, FourRanksAreOneWorldWithTheirNodeLocalRanks) {
  auto r = run_muster({"run", "-n", "4", "--tag", "none", "--", program()});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto lines = r.out_lines();
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"rank 0 of 4 local 0 wrong 0", "rank 1 of 4 local 1 wrong 0",
                                             "rank 2 of 4 local 2 wrong 0", "rank 3 of 4 local 3 wrong 0"}));
}

// MPI_Abort ends the job with the rank's code, as mpirun's does, and says who called it.
TEST_F(MpichLocal, MpiAbortEndsTheJobWithTheRanksCodeAndName) {
  auto r = run_muster({"run", "-n", "3", "--", program(), "2"});
  EXPECT_EQ(r.exit_code, 7) << r.err << r.out;
  EXPECT_NE(r.err.find("rank 2 called MPI_Abort with code 7"), std::string::npos) << r.err;
}

// A rank that never reaches MPI_Init leaves the others in PMI's barrier: the timeout names
// the barrier and the rank missing from it, and nothing is left running.
TEST_F(MpichLocal, ARankThatNeverEntersTheBarrierIsNamedAtTheTimeout) {
  auto r = run_muster({"run", "-n", "3", "--timeout", "3", "--", "sh", "-c",
                       fmt::format("if [ \"$RANK\" = 1 ]; then sleep 60; fi; exec {}", program())});
  EXPECT_EQ(r.exit_code, 124) << r.err << r.out;
  EXPECT_NE(r.err.find("at the timeout the ranks were waiting in PMI barrier 1 (MPI_Init's, or a PMI_Barrier): "
                       "rank 1 never entered it"),
            std::string::npos)
      << r.err;
}

// A rank killed while the others wait for it in the barrier ends the job at once, named;
// the others never got past MPI_Init (served nothing, each would be a world of one and
// finish).
TEST_F(MpichLocal, ARankKilledWhileOthersWaitInTheBarrierEndsTheJob) {
  auto r = run_muster({"run", "-n", "3", "--tag", "none", "--timeout", "60", "--", "sh", "-c",
                       fmt::format("if [ \"$RANK\" = 2 ]; then sleep 1; kill -9 $$; fi; exec {}", program())});
  EXPECT_EQ(r.exit_code, 137) << r.err << r.out;
  EXPECT_NE(r.err.find("rank 2 ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SIGKILL"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("rank 0 of"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rank 1 of"), std::string::npos) << r.out;
}

// mpi4py over Debian's Open MPI 4.1: PMIx from muster's server, as under srun --mpi=pmix.
class Mpi4pyLocal : public ::testing::Test {
 protected:
  void SetUp() override {
    if (run_command({"/usr/bin/python3", "-c", "import mpi4py"}).exit_code != 0) {
      if (in_ci()) FAIL() << "mpi4py is missing (apt-get install python3-mpi4py)";
      GTEST_SKIP() << "needs python3-mpi4py";
    }
  }
  static std::string program() { return source_path("/tests/e2e/mpi/mpi4py_hello.py"); }
};

// The issue's own run: two worlds of one each, believing they were rank 0, exit status 0.
TEST_F(Mpi4pyLocal, FourRanksAreOneWorldWithTheirNodeLocalRanks) {
  auto r = run_muster({"run", "-n", "4", "--tag", "none", "--", "/usr/bin/python3", program()});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto lines = r.out_lines();
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"rank 0 of 4 local 0 wrong 0", "rank 1 of 4 local 1 wrong 0",
                                             "rank 2 of 4 local 2 wrong 0", "rank 3 of 4 local 3 wrong 0"}));
  EXPECT_EQ(r.err.find("outside its ranks' process groups"), std::string::npos) << r.err;  // no orted of its own
}

TEST_F(Mpi4pyLocal, MpiAbortEndsTheJobWithTheRanksCodeAndName) {
  // A deadline, so that a job that never ends says where each rank was (once in CI, without
  // one, it waited out the harness's 180 s and said nothing).
  auto r = run_muster({"run", "-n", "3", "--timeout", "60", "--", "/usr/bin/python3", program(), "1"});
  EXPECT_EQ(r.exit_code, 7) << r.err << r.out;
  EXPECT_NE(r.err.find("rank 1 called MPI_Abort with code 7"), std::string::npos) << r.err;
}

// The hang with mpi4py: rank 2 asleep before the allreduce the others spin in, in
// Open MPI's progress loop, each caught at its own frame of it. At the timeout rank 2 alone is
// named, with where it is.
TEST_F(Mpi4pyLocal, AtTheTimeoutTheRankOutsideTheAllreduceIsNamed) {
  const std::string hang = source_path("/tests/e2e/stacks/hang_mpi.py");
  auto r = run_muster({"run", "-n", "4", "--timeout", "8", "--grace", "1", "--", "/usr/bin/python3", hang});
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_NE(r.err.find(") is not in <module> (" + hang + ":13), where the 3 other ranks wait: it is in "
                       "clock_nanosleep <- <module> (" + hang + ":11)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("  rank 2 ("), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("rank 0 ("), std::string::npos) << r.err;  // no other rank is named
}

// With --mpi none nothing is served: each rank is a world of one, as with no launcher.
TEST_F(Mpi4pyLocal, WithNothingServedEachRankIsAWorldOfOne) {
  auto r = run_muster({"run", "-n", "2", "--tag", "none", "--mpi", "none", "--", "/usr/bin/python3", program()});
  auto lines = r.out_lines();
  EXPECT_EQ(lines, (std::vector<std::string>{"rank 0 of 1 local 0 wrong 0", "rank 0 of 1 local 0 wrong 0"}))
      << r.err;
}

// Across the test cluster's hosts: 4 hosts x 2 slots, the ranks of each host served by its
// agent, the fences carried through the head. Open MPI's TCP transport between hosts, its
// shared memory within one.
class MpiCluster : public SharedCluster<MpiCluster> {
 protected:
  void SetUp() override {
    SharedCluster::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    cluster_->trust_host_keys();
    if (run_command({"/usr/bin/python3", "-c", "import mpi4py"}).exit_code != 0) {
      if (in_ci()) FAIL() << "mpi4py is missing (apt-get install python3-mpi4py)";
      GTEST_SKIP() << "needs python3-mpi4py";
    }
  }
  static std::string two_slots(const std::string& extra = "") {
    return cluster_->write_cluster_file("launch:\n  slots: 2\n" + extra);
  }
  static std::string mpi4py() { return source_path("/tests/e2e/mpi/mpi4py_hello.py"); }
  // Every world line a run of `size` ranks, 2 a host, should print.
  static std::vector<std::string> one_world(int size) {
    std::vector<std::string> lines;
    for (int r = 0; r < size; ++r) lines.push_back(fmt::format("rank {} of {} local {} wrong 0", r, size, r % 2));
    std::sort(lines.begin(), lines.end());
    return lines;
  }
  // How many ranks a stacks report names as elsewhere.
  static size_t count_named(const std::string& err) {
    size_t n = 0;
    for (size_t at = err.find(") is not in "); at != std::string::npos; at = err.find(") is not in ", at + 1)) ++n;
    return n;
  }
  // No rank or MPI daemon (orted) left on any host, once muster returned.
  static void expect_nothing_left(const std::string& program) {
    for (int i = 0; i < cluster_->size(); ++i)
      for (pid_t pid : cluster_->processes_on(i)) {
        std::ifstream in(fmt::format("/proc/{}/cmdline", pid));
        std::string args((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        EXPECT_TRUE(args.find("mpi4py_hello") == std::string::npos && args.find("mpi_hello") == std::string::npos &&
                    args.find("hang_mpi") == std::string::npos &&
                    args.find("orted") == std::string::npos)
            << cluster_->host(i) << " still runs a process of " << program << ": " << args;
      }
  }
};

TEST_F(MpiCluster, Mpi4pyEightRanksOverFourHostsAreOneWorld) {
  auto r = cluster_->muster({"run", "-f", two_slots(), "--tag", "none", "--timeout", "120", "--",
                             "/usr/bin/python3", mpi4py()});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto lines = r.out_lines();
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, one_world(8)) << r.err;
  expect_nothing_left("mpi4py");
}

// The hang with mpi4py across hosts: 8 ranks, 2 a host, rank 5 asleep before the
// allreduce the others spin in. At the timeout each node's agent reads its ranks, and rank 5
// alone is named, with its host and line.
TEST_F(MpiCluster, Mpi4pyAtTheTimeoutTheRankOutsideTheAllreduceIsNamedWithItsHost) {
  const std::string hang = source_path("/tests/e2e/stacks/hang_mpi.py");
  auto r = cluster_->muster({"run", "-f", two_slots(), "--timeout", "20", "--", "/usr/bin/python3", hang, "5"}, 240);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_NE(r.err.find("  rank 5 (" + cluster_->host(2) + ") is not in <module> (" + hang +
                       ":13), where the 7 other ranks wait: it is in clock_nanosleep <- <module> (" + hang + ":11)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(count_named(r.err), 1u) << r.err;  // no other rank is named
  expect_nothing_left("hang_mpi");
}

TEST_F(MpiCluster, Mpi4pyAbortOnOneHostEndsTheJobOnEveryHost) {
  auto r = cluster_->muster({"run", "-f", two_slots(), "--timeout", "120", "--", "/usr/bin/python3", mpi4py(), "5"});
  EXPECT_EQ(r.exit_code, 7) << r.err << r.out;
  EXPECT_NE(r.err.find("rank 5 called MPI_Abort with code 7"), std::string::npos) << r.err;
  expect_nothing_left("mpi4py");
}

// Open MPI with its modex asynchronous: no fence carries the ranks' addresses, each asks
// for a peer's when it first needs it (PMIx's direct modex), answered by the peer's node
// through the head.
TEST_F(MpiCluster, Mpi4pyWithAsyncModexFetchesEachPeersDataFromItsNode) {
  auto r = cluster_->muster({"run", "-f", two_slots(), "--tag", "none", "--timeout", "120", "-x",
                             "OMPI_MCA_pmix_base_async_modex=1", "-x", "OMPI_MCA_pmix_base_collect_data=0", "--",
                             "/usr/bin/python3", mpi4py()});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto lines = r.out_lines();
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, one_world(8)) << r.err;
}

// Rank 3 dies while the others wait for it in MPI_Init's fence: the job ends at once, named.
TEST_F(MpiCluster, ARankKilledWhileTheOthersWaitInTheFenceEndsTheJob) {
  auto r = cluster_->muster({"run", "-f", two_slots(), "--tag", "none", "--timeout", "120", "--", "sh", "-c",
                             fmt::format("if [ \"$RANK\" = 3 ]; then sleep 2; kill -9 $$; fi; exec /usr/bin/python3 {}",
                                         mpi4py())});
  EXPECT_EQ(r.exit_code, 137) << r.err << r.out;
  EXPECT_NE(r.err.find("rank 3 ("), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("rank 0 of"), std::string::npos) << r.out;
  expect_nothing_left("mpi4py");
}

// A rank that never reaches MPI_Init: at the timeout the fence is named with the host whose
// ranks had not all entered it, and that host says which of its own had not.
TEST_F(MpiCluster, TheTimeoutNamesTheFenceAndTheRankThatNeverEnteredIt) {
  auto r = cluster_->muster({"run", "-f", two_slots(), "--timeout", "15", "--", "sh", "-c",
                             fmt::format("if [ \"$RANK\" = 5 ]; then sleep 60; fi; exec /usr/bin/python3 {}", mpi4py())});
  EXPECT_EQ(r.exit_code, 124) << r.err << r.out;
  EXPECT_NE(r.err.find("at the timeout the ranks were waiting in PMIx's fence 1: not every rank of node3 (ranks 4, 5) "
                       "had entered it"),
            std::string::npos)
      << r.err;
  expect_nothing_left("mpi4py");
}

// Open MPI's TCP transport and UCX are told the interface muster measured, as NCCL is,
// unless the user chose theirs (Open MPI refuses an include list beside an exclude list).
TEST_F(MpiCluster, MpiIsToldTheInterfaceMusterChoseUnlessTheUserChose) {
  auto r = cluster_->muster({"run", "-f", two_slots(), "--tag", "none", "-n", "2", "--", "sh", "-c",
                             "echo $OMPI_MCA_btl_tcp_if_include $UCX_NET_DEVICES"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out_lines(), (std::vector<std::string>{"eth0 eth0", "eth0 eth0"}));
  auto mine = cluster_->muster({"run", "-f", two_slots(), "--tag", "none", "-n", "1", "-x",
                                "OMPI_MCA_btl_tcp_if_exclude=lo", "--", "sh", "-c",
                                "echo include=$OMPI_MCA_btl_tcp_if_include"});
  ASSERT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_EQ(mine.out_lines(), (std::vector<std::string>{"include="}));
}

TEST_F(MpiCluster, MpichEightRanksOverFourHostsAreOneWorld) {
  if (access("/usr/bin/mpicc.mpich", X_OK) != 0) {
    if (in_ci()) FAIL() << "mpicc.mpich is missing (apt-get install mpich libmpich-dev)";
    GTEST_SKIP() << "needs mpicc.mpich";
  }
  const std::string program = cluster_->dir() + "/mpi_hello";
  auto built = run_command({"/usr/bin/mpicc.mpich", "-O1", "-o", program,
                            source_path("/tests/e2e/mpi/mpi_hello.c")});
  ASSERT_EQ(built.exit_code, 0) << built.err;
  auto r = cluster_->muster({"run", "-f", two_slots(), "--tag", "none", "--timeout", "20", "--", program});
  auto lines = r.out_lines();
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, one_world(8)) << r.err;
  // Debian's MPICH 4.0.2 (ch4:ucx) can hang in MPI_Finalize across hosts when the machine is
  // busy: a rank that closed its UCX endpoints first blocks in PMI's last barrier, where it no
  // longer progresses UCX, while a peer still waits in ucp_worker_progress for it to confirm
  // the close (gdb on the test hosts showed exactly that; Hydra's barrier blocks the same way).
  // The world was whole either way; the hang is said as such.
  if (r.exit_code != 0) {
    EXPECT_EQ(r.exit_code, 124) << r.err;
    EXPECT_NE(r.err.find("waiting in PMI's fence 4"), std::string::npos) << r.err;
  }
  auto aborted = cluster_->muster({"run", "-f", two_slots(), "--timeout", "120", "--", program, "6"});
  EXPECT_EQ(aborted.exit_code, 7) << aborted.err << aborted.out;
  EXPECT_NE(aborted.err.find("rank 6 called MPI_Abort with code 7"), std::string::npos) << aborted.err;
  expect_nothing_left("mpi_hello");
}

}  // namespace
}  // namespace muster::testing
