#include "launcher/cluster/hostfile.h"

#include <gtest/gtest.h>

#include "launcher/cluster/cluster_file.h"
#include "launcher/error.h"

namespace muster {
namespace {

std::vector<std::string> problems_of_hostfile(const std::string& text) {
  try {
    parse_hostfile(text, "hosts");
  } catch (const Error& e) {
    return e.messages();
  }
  ADD_FAILURE() << "accepted:\n" << text;
  return {};
}

// exec runs one command a node, not ranks: a machine listed twice is said in its words.
TEST(HostOption, AMachineListedTwiceIsSaidInTheWordsOfWhatItIsReadFor) {
  try {
    parse_host_option("localhost,localhost", ClusterUse::Command);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.messages(), std::vector<std::string>{
                                "-H 'localhost,localhost': host 'localhost' is listed twice (first at -H "
                                "'localhost,localhost'); a machine listed twice would run the command twice "
                                "on one machine; list it once"});
  }
  try {
    parse_cluster_yaml("nodes: [a, a]\n", "cluster.yaml", ClusterUse::Command);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    ASSERT_EQ(e.messages().size(), 1u);
    EXPECT_NE(e.messages()[0].find("would run the command twice on one machine; list it once"), std::string::npos)
        << e.messages()[0];
  }
}

TEST(Hostfile, ReadsOpenMpiAndDeepSpeedLines) {
  ClusterSpec spec = parse_hostfile("# head\nworker-1 slots=4\n\nworker-2 slots=8 max_slots=8  # x\n"
                                    "gpu[01-02]\n", "hosts");
  ASSERT_EQ(spec.nodes.size(), 4u);
  EXPECT_EQ(spec.nodes[0].host, "worker-1");
  EXPECT_EQ(spec.nodes[0].slots.fixed, 4);
  EXPECT_EQ(spec.nodes[1].slots.fixed, 8);
  EXPECT_EQ(spec.nodes[2].host, "gpu01");
  EXPECT_TRUE(spec.nodes[3].slots.is_auto());
  EXPECT_EQ(spec.nodes[1].where.str(), "hosts:4:1");
}

TEST(Hostfile, NamesEachBadWordWithLineAndColumn) {
  auto problems = problems_of_hostfile("a slots=x\nb slot=2\nc slots=0\nd\nd slots=1\n");
  ASSERT_EQ(problems.size(), 4u);
  EXPECT_EQ(problems[0], "hosts:1:3: slots must be a whole number of at least 1, not 'x'");
  EXPECT_EQ(problems[1], "hosts:2:3: unknown word 'slot=2', did you mean 'slots=...'?");
  EXPECT_EQ(problems[2], "hosts:3:3: slots must be a whole number of at least 1, not '0'");
  EXPECT_EQ(problems[3], "hosts:5:1: host 'd' is listed twice (first at hosts:4:1); a machine "
                         "listed twice would run duplicate ranks; give it one entry with more "
                         "slots instead");
}

TEST(Hostfile, AnEmptyHostfileIsAnError) {
  auto problems = problems_of_hostfile("# nothing\n");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("names no hosts"), std::string::npos);
}

TEST(HostOption, ReadsHostsWithSlotsAndHostLists) {
  ClusterSpec spec = parse_host_option("gpu[01-02]:8,cpu1,cpu2:1");
  ASSERT_EQ(spec.nodes.size(), 4u);
  EXPECT_EQ(spec.nodes[0].host, "gpu01");
  EXPECT_EQ(spec.nodes[1].slots.fixed, 8);
  EXPECT_TRUE(spec.nodes[2].slots.is_auto());
  EXPECT_EQ(spec.nodes[3].slots.fixed, 1);
}

TEST(HostOption, RejectsBadSlotsAndDuplicates) {
  for (const char* bad : {"a:x", "a:0", "a:-2", "a,a", "a[1-"}) {
    try {
      parse_host_option(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Config);
      EXPECT_NE(std::string(e.what()).find(std::string("-H '") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(ThisMachine, IsOneNodeReachedOnLoopback) {
  ClusterSpec spec = this_machine_cluster();
  ASSERT_EQ(spec.nodes.size(), 1u);
  EXPECT_TRUE(spec.is_this_machine);
  EXPECT_EQ(spec.nodes[0].address, "127.0.0.1");
  EXPECT_TRUE(is_this_machine("localhost"));
  EXPECT_FALSE(is_this_machine("gpu-node-that-is-not-here"));
}

}  // namespace
}  // namespace muster
