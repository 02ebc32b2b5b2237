// The stacks report on the test cluster: 8 torch Gloo ranks on 4 hosts (2 slots each) that
// hang as users' jobs do, read by the agents over SSH at --timeout, at --stall and by
// `muster stacks`, with the odd rank named with its host.
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "launcher/cluster/hostlist.h"
#include "tests/support/build_paths.h"
#include "tests/support/command_runner.h"
#include "tests/support/shared_cluster.h"

namespace muster::testing {
namespace {

const std::string kHang = source_path("/tests/e2e/stacks/hang.py");

class StacksCluster : public SharedCluster<StacksCluster> {
 protected:
  void SetUp() override {
    SharedCluster::SetUp();
    if (run_command({"/usr/bin/python3", "-c", "import torch.distributed"}).exit_code != 0) {
      if (in_ci()) FAIL() << "python3-torch is missing; .ci/run installs it";
      GTEST_SKIP() << "Debian's python3-torch is not installed (apt-get install python3-torch)";
    }
  }
  // 8 ranks: 0-1 on the first host, ..., 4-5 on the third, 6-7 on the fourth.
  static std::vector<std::string> run(const std::vector<std::string>& flags, const std::vector<std::string>& mode) {
    std::vector<std::string> args = {"run", "-f", cluster_->write_cluster_file("launch:\n  slots: 2\n")};
    args.insert(args.end(), flags.begin(), flags.end());
    for (const auto& word : {"--", "/usr/bin/python3", kHang.c_str()}) args.push_back(word);
    args.insert(args.end(), mode.begin(), mode.end());
    return args;
  }
  static bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
  // A job whose ranks wait forever, stopped as Ctrl-C stops it once its stall report says
  // `said` (and a second more, for the rest of the report): the report is what is tested, and
  // waiting out a --timeout long enough for a loaded machine held the cluster 40 s a test.
  static CommandResult stopped_after_the_stall_report(const std::vector<std::string>& args, const std::string& said) {
    RunningCommand job(cluster_->muster_argv(args));
    if (has(job.read_err_until(said, std::chrono::seconds(150)), said)) job.read_err_until("", std::chrono::seconds(1));
    job.signal(SIGINT);
    return job.wait(std::chrono::seconds(60));
  }
  // The number of hang.py's first line that holds `code`, as a Python stack names it.
  static int line_of(const std::string& code) {
    std::ifstream script(kHang);
    int number = 0;
    for (std::string line; std::getline(script, line);) {
      ++number;
      if (has(line, code)) return number;
    }
    ADD_FAILURE() << kHang << " has no line with " << code;
    return 0;
  }
};

TEST_F(StacksCluster, AtTheTimeoutTheRankOutsideTheAllReduceIsNamedWithItsHost) {
  auto r = cluster_->muster(run({"--timeout", "30"}, {"odd"}), 240);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_TRUE(has(r.err, "stacks of 8 ranks on")) << r.err;
  EXPECT_TRUE(has(r.err, "read at the timeout")) << r.err;
  EXPECT_TRUE(has(r.err, "rank 5 (" + cluster_->host(2) + ") is not in all_reduce (")) << r.err;
  EXPECT_TRUE(has(r.err, "where the 7 other ranks wait: it is in ")) << r.err;
  EXPECT_TRUE(has(r.err, "it is in clock_nanosleep <- <module> (" + kHang + ":" +
                                std::to_string(line_of("time.sleep(100000)")) + ")")) << r.err;
  EXPECT_FALSE(has(r.err, "cannot reach this job")) << r.err;
  // Named once: no other rank is said to be elsewhere, and the teardown follows the report.
  EXPECT_FALSE(has(r.err, "rank 4 (")) << r.err;
  EXPECT_LT(r.err.find("stacks of 8 ranks"), r.err.find("the job ran past --timeout")) << r.err;
}

TEST_F(StacksCluster, AtAStallARankThatEndedIsNamedAsGoneNotStuck) {
  const std::string gone = "rank 3 (" + cluster_->host(1) + ") has ended (exited with status 0)";
  auto r = stopped_after_the_stall_report(run({"--stall", "6", "--timeout", "120"}, {"gone"}), gone);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_TRUE(has(r.err, "when no rank had written a line for the --stall time")) << r.err;
  EXPECT_TRUE(has(r.err, gone)) << r.err;
  EXPECT_FALSE(has(r.err, "rank 3 (" + cluster_->host(1) + ") is not in")) << r.err;
}

TEST_F(StacksCluster, RanksAllWaitingInOnePlaceAreSaidToAndTheCallIsNamed) {
  const std::string same = "all 8 ranks read wait in the same place: recv (";
  auto r = stopped_after_the_stall_report(run({"--stall", "6", "--timeout", "120"}, {"same"}), same);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_TRUE(has(r.err, same)) << r.err;
  EXPECT_FALSE(has(r.err, ") is not in")) << r.err;
}

// A C program of MPICH's: the ranks poll inside MPI_Barrier, each caught at its own frame of
// MPICH's progress loop, and rank 5 spins in a loop of its own: it is the one named.
TEST_F(StacksCluster, AnMpichRankSpinningOutsideTheBarrierIsNamed) {
  if (access("/usr/bin/mpicc.mpich", X_OK) != 0) {
    if (in_ci()) FAIL() << "mpicc.mpich is missing (apt-get install mpich libmpich-dev)";
    GTEST_SKIP() << "needs mpicc.mpich (apt-get install mpich libmpich-dev)";
  }
  TempDir dir;
  auto built = run_command({"/usr/bin/mpicc.mpich", "-O1", "-g", "-o", dir.file("spin"),
                            source_path("/tests/e2e/stacks/spin.c")});
  ASSERT_EQ(built.exit_code, 0) << built.err;
  auto r = cluster_->muster({"run", "-f", cluster_->write_cluster_file("launch:\n  slots: 2\n"), "--mpi", "pmi1",
                             "--stall", "6", "--timeout", "20", "--", dir.file("spin")},
                            240);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_TRUE(has(r.err, "rank 5 (" + cluster_->host(2) + ") is not in PMPI_Barrier, where the 7 other ranks wait: "
                         "it is in spin_here <- main"))
      << r.err;
}

TEST_F(StacksCluster, MusterStacksNamesTheSleeperAndTheJobFinishesUnharmed) {
  RunningCommand job(cluster_->muster_argv(run({"--timeout", "200"}, {"finish", "15"})));
  for (int rank : {0, 1, 2, 3, 4, 5, 6, 7})
    ASSERT_TRUE(has(job.read_out_until("[" + std::to_string(rank) + "] in place", std::chrono::seconds(150)),
                    "[" + std::to_string(rank) + "] in place"));
  auto stacks = cluster_->muster({"stacks"}, 60);
  EXPECT_EQ(stacks.exit_code, 0) << stacks.out << stacks.err;
  EXPECT_TRUE(has(stacks.out, "read on request")) << stacks.out;
  EXPECT_TRUE(has(stacks.out, "rank 5 (" + cluster_->host(2) + ") is not in all_reduce (")) << stacks.out;
  auto json = cluster_->muster({"stacks", "--json"}, 60);
  EXPECT_EQ(json.exit_code, 0) << json.err;
  // Rank 5, and only rank 5, is elsewhere.
  const auto report = nlohmann::json::parse(json.out, nullptr, false);
  ASSERT_TRUE(report.is_object() && report.contains("elsewhere")) << json.out;
  ASSERT_EQ(report["elsewhere"].size(), 1u) << json.out;
  EXPECT_EQ(report["elsewhere"][0].value("rank", -1), 5) << json.out;
  // The job goes on and ends as it would have: every rank's all-reduce done.
  auto end = job.wait(std::chrono::seconds(200));
  EXPECT_EQ(end.exit_code, 0) << end.err;
  int done = 0;
  for (const auto& line : end.out_lines()) done += has(line, "done 8");
  EXPECT_EQ(done, 8) << end.out;
}

// What the ranks' libraries know, asked on every node beside the stacks: each node's NCCL RAS
// service (ranks that mapped "libnccl" and serve ncclras's protocol, nccl_job.py) names the
// rank whose all-reduce count fell behind, and every rank's flight recorder, asked through its
// pipe, writes a dump that reaches the head's one directory.
TEST_F(StacksCluster, NcclsRasServiceAndEveryRanksFlightRecorderAreAskedAndTheDumpsGathered) {
  TempDir dir;
  dir.write("libnccl.so.2.24.3", std::string(8192, '\0'));
  auto r = cluster_->muster({"run", "-f", cluster_->write_cluster_file("launch:\n  slots: 2\n"), "--timeout", "20",
                             "-x", "TORCH_NCCL_TRACE_BUFFER_SIZE=2000", "-x",
                             "TORCH_NCCL_DEBUG_INFO_PIPE_FILE=" + dir.file("pipe_"), "-x",
                             "TORCH_NCCL_DEBUG_INFO_TEMP_FILE=" + dir.file("nccl_trace_rank_"), "--", "/usr/bin/python3",
                             source_path("/tests/e2e/stacks/nccl_job.py"), dir.file("libnccl.so.2.24.3"), "5"},
                            240);
  EXPECT_EQ(r.exit_code, 124) << r.err;
  EXPECT_TRUE(has(r.err, "rank 5 (" + cluster_->host(2) + ") is not in all_reduce (")) << r.err;
  // Every node's service speaks for the whole job: one answer, said once with its nodes.
  const std::string nodes = fold_hostlist({cluster_->host(0), cluster_->host(1), cluster_->host(2), cluster_->host(3)});
  EXPECT_TRUE(has(r.err, "NCCL's RAS service (asked on " + nodes + ") reports:\n")) << r.err;
  EXPECT_TRUE(has(r.err, "Rank 5 has launched up to operation 11")) << r.err;
  const NamedDirectory named(r.err, "torch's flight recorder: the dumps of ranks 0-7 collected in ");
  const std::string& collected = named.path();
  ASSERT_NE(collected, "") << r.err;
  EXPECT_NE(collected.find("/muster-flight-recorder-"), std::string::npos) << collected;
  for (int rank = 0; rank < 8; ++rank) {
    const std::string file = collected + "nccl_trace_rank_" + std::to_string(rank);
    auto dumped = run_command({"/usr/bin/python3", "-c",
                               "import pickle, sys; print(pickle.load(open(sys.argv[1], 'rb'))['rank'])", file});
    EXPECT_EQ(dumped.out, std::to_string(rank) + "\n") << file << dumped.err;
  }
  EXPECT_FALSE(has(r.err, "flight recorder (")) << "no rank's dump went missing: " << r.err;
}

}  // namespace
}  // namespace muster::testing
