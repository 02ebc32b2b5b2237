// Debian's python3-torch as a real client of `muster run`: a Gloo all_reduce whose ranks
// learn everything (rank, world size, rendezvous) from the environment muster gives them.
#include <unistd.h>

#include <set>

#include <gtest/gtest.h>

#include "tests/support/build_paths.h"
#include "tests/support/command_runner.h"

namespace muster::testing {
namespace {

bool torch_available() {
  return run_command({"/usr/bin/python3", "-c", "import torch.distributed"}).exit_code == 0;
}

TEST(TorchGloo, FourRanksAllReduceThroughEnvInit) {
  if (!torch_available()) {
    if (in_ci()) FAIL() << "python3-torch is missing; .ci/run installs it";
    GTEST_SKIP() << "Debian's python3-torch is not installed (apt-get install python3-torch)";
  }
  auto r = run_muster({"run", "-n", "4", "--timeout", "240", "--", "/usr/bin/python3",
                       source_path("/tests/e2e/torch_allreduce.py")});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::set<std::string> seen;
  for (const auto& line : r.out_lines()) {
    int tag = -1, rank = -1, world = -1, local = -1, wrong = -1;
    double sum = 0, expected = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "[%d] rank %d of %d local_rank %d sum %lf expected %lf wrong %d",
                          &tag, &rank, &world, &local, &sum, &expected, &wrong), 7) << line;
    EXPECT_EQ(tag, rank);
    EXPECT_EQ(world, 4);
    EXPECT_EQ(local, rank);
    EXPECT_EQ(sum, 10.0);  // 1 + 2 + 3 + 4
    EXPECT_EQ(expected, 10.0);
    EXPECT_EQ(wrong, 0);
    seen.insert(std::to_string(rank));
  }
  EXPECT_EQ(seen, (std::set<std::string>{"0", "1", "2", "3"}));
}

}  // namespace
}  // namespace muster::testing
