// MPI programs under muster with real MPI libraries from Debian as the clients: MPICH, whose
// simple PMI speaks PMI-1 over PMI_FD as under Hydra (the program is built here with
// mpicc.mpich, as a user builds one), and mpi4py over Open MPI, which asks PMIx.
#include <unistd.h>

#include <algorithm>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "tests/support/command_runner.h"

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
                              std::string(MUSTER_SOURCE_DIR) + "/tests/e2e/mpi/mpi_hello.c"});
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
  static std::string program() { return std::string(MUSTER_SOURCE_DIR) + "/tests/e2e/mpi/mpi4py_hello.py"; }
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
  auto r = run_muster({"run", "-n", "3", "--", "/usr/bin/python3", program(), "1"});
  EXPECT_EQ(r.exit_code, 7) << r.err << r.out;
  EXPECT_NE(r.err.find("rank 1 called MPI_Abort with code 7"), std::string::npos) << r.err;
}

// With --mpi none nothing is served: each rank is a world of one, as with no launcher.
TEST_F(Mpi4pyLocal, WithNothingServedEachRankIsAWorldOfOne) {
  auto r = run_muster({"run", "-n", "2", "--tag", "none", "--mpi", "none", "--", "/usr/bin/python3", program()});
  auto lines = r.out_lines();
  EXPECT_EQ(lines, (std::vector<std::string>{"rank 0 of 1 local 0 wrong 0", "rank 0 of 1 local 0 wrong 0"}))
      << r.err;
}

// Across nodes the barrier is not carried yet: asking for PMI-1 there is refused before
// anything starts, not served to each node alone (ranks would form one world per node).
TEST(MpiChoice, Pmi1AcrossNodesIsRefusedBeforeAnythingStarts) {
  auto r = run_muster({"run", "-H", "node-a,node-b", "--mpi", "pmi1", "--", "true"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--mpi pmi1 serves ranks on this machine only"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace muster::testing
