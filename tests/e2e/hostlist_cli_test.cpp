// `muster hostlist` against ClusterShell's own nodeset, run side by side.
#include <unistd.h>

#include <gtest/gtest.h>

#include "tests/support/command_runner.h"

namespace muster::testing {
namespace {

const char* const kLists[] = {
    "gpu[01-16]",
    "r[1-2]n[001-004]",
    "a,b,c[1,3,5-7]",
    "z,y[1-2],a",
    "n002,n01,n1,n10,n3",
    "n[8-12],n[08-12]",
    "n98,n99,n100,n098",
    "r1n1,r1n2,r2n1,r2n2,r3n5",
    "x[1-3]y[1-3],x2y5",
    "r[1-2]n[1-2]c[1-3],r3n1c1",
    "host-[1-3].example,login",
    "n[1-10/3]",
    "gpu9,gpu10,gpu11",
};

TEST(HostlistCli, MatchesNodesetExpandFoldAndCount) {
  if (access("/usr/bin/nodeset", X_OK) != 0) {
    if (in_ci()) FAIL() << "nodeset (clustershell) is missing; .ci/run installs it";
    GTEST_SKIP() << "ClusterShell's nodeset is not installed (apt-get install clustershell)";
  }
  for (const char* list : kLists) {
    // muster's own spelling of nodeset's -f is --fold: -f is the cluster file in muster.
    for (const auto& [mode, ours_mode] : {std::pair{"-e", "-e"}, {"-f", "--fold"}, {"-c", "-c"}}) {
      auto theirs = run_command({"/usr/bin/nodeset", mode, list});
      auto ours = run_muster({"hostlist", ours_mode, list});
      ASSERT_EQ(theirs.exit_code, 0) << theirs.err;
      EXPECT_EQ(ours.exit_code, 0) << ours.err;
      EXPECT_EQ(ours.out, theirs.out) << "nodeset " << mode << " '" << list << "'";
    }
    // With no flag, muster hostlist expands, as nodeset -e does.
    EXPECT_EQ(run_muster({"hostlist", list}).out, run_command({"/usr/bin/nodeset", "-e", list}).out)
        << list;
  }
}

TEST(HostlistCli, MalformedListsAreRejectedLikeNodesetDoes) {
  for (const char* bad : {"gpu[3-1]", "gpu[1-", "gpu[]", "n[1-200000]"}) {
    auto ours = run_muster({"hostlist", bad});
    EXPECT_EQ(ours.exit_code, 2) << bad;
    EXPECT_NE(ours.err.find(std::string("muster: error: host list '") + bad + "'"),
              std::string::npos) << ours.err;
  }
}

}  // namespace
}  // namespace muster::testing
