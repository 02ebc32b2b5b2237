// The allocation as the cluster: Slurm's variables read as srun reads them.
#include <gtest/gtest.h>

#include "launcher/cluster/cluster_input.h"
#include "launcher/cluster/rank_env.h"
#include "launcher/cluster/slurm_allocation.h"
#include "launcher/error.h"
#include "launcher/remote/slurm_exec.h"
#include "launcher/remote/slurm_launcher.h"

namespace muster {
namespace {

TEST(SlurmCounts, ExpandsSlurmsCompressedForm) {
  EXPECT_EQ(expand_slurm_counts("2(x3),1", "V"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_slurm_counts("8", "V"), (std::vector<int>{8}));
  EXPECT_EQ(expand_slurm_counts("1,4(x2)", "V"), (std::vector<int>{1, 4, 4}));
}

TEST(SlurmCounts, RefusesWhatIsNotACountNamingTheVariable) {
  for (const char* bad : {"", "0", "x", "2(x)", "2(x3", "-1", "2(x0)", "99999999999", "1(x2000000)"}) {
    try {
      expand_slurm_counts(bad, "SLURM_TASKS_PER_NODE");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("SLURM_TASKS_PER_NODE"), std::string::npos) << e.what();
    }
  }
}

Environment allocation(const std::string& nodes, const std::string& tasks) {
  return Environment{{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", nodes}, {"SLURM_TASKS_PER_NODE", tasks}};
}

TEST(SlurmAllocation, NodesInOrderWithTheirSlotsAndWhereTheyCameFrom) {
  ClusterSpec spec = slurm_allocation_cluster(allocation("gpu[01-03],cpu7", "2(x3),1"));
  ASSERT_EQ(spec.nodes.size(), 4u);
  EXPECT_EQ(spec.nodes[0].host, "gpu01");
  EXPECT_EQ(spec.nodes[2].host, "gpu03");
  EXPECT_EQ(spec.nodes[3].host, "cpu7");
  EXPECT_EQ(spec.nodes[0].slots.fixed, 2);
  EXPECT_EQ(spec.nodes[3].slots.fixed, 1);
  EXPECT_EQ(spec.launcher, Launcher::Slurm);
  EXPECT_NE(spec.source.find("Slurm allocation (job 42"), std::string::npos) << spec.source;
  EXPECT_TRUE(slurm_allocation_cluster(allocation("n[1-2]", "4(x2)"), true).nodes[0].slots.is_auto());
}

TEST(SlurmAllocation, CountsThatDoNotMatchTheNodesAreRefused) {
  EXPECT_THROW(slurm_allocation_cluster(allocation("n[1-3]", "2(x2)")), Error);
  EXPECT_THROW(slurm_allocation_cluster(Environment{{"SLURM_JOB_NODELIST", "n1"}}), Error);
}

TEST(SlurmAllocation, AutoTakesTheAllocationOnlyInsideOneAndOnlyWhenNoClusterIsNamed) {
  ClusterInput input;
  EXPECT_EQ(load_cluster(input, allocation("n[1-2]", "1(x2)")).nodes.size(), 2u);
  EXPECT_TRUE(load_cluster(input, Environment{}).is_this_machine);
  input.hosts = "a,b,c";
  ClusterSpec named = load_cluster(input, allocation("n[1-2]", "1(x2)"));
  EXPECT_EQ(named.nodes.size(), 3u);
  EXPECT_EQ(named.launcher, Launcher::Ssh);
  input.launcher = LauncherChoice::Slurm;
  EXPECT_EQ(load_cluster(input, allocation("n[1-2]", "1(x2)")).launcher, Launcher::Slurm);
  try {
    load_cluster(input, Environment{});
    ADD_FAILURE() << "the Slurm launcher outside an allocation was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("salloc"), std::string::npos) << e.what();
  }
  input.hosts.clear();
  EXPECT_THROW(load_cluster(input, Environment{}), Error);
}

TEST(SlurmAllocation, RanksDoNotInheritTheAgentsTaskVariables) {
  RankPlan plan = make_rank_plan(slurm_allocation_cluster(allocation("n[1-2]", "1(x2)")), std::nullopt, MapBy::Slot);
  Environment agent{{"SLURM_PROCID", "1"}, {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "1"},
                    {"SLURM_STEP_ID", "3"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "42"},
                    {"SLURM_JOB_NODELIST", "n[1-2]"}, {"PATH", "/bin"}};
  JobEnvironment job;
  Environment env = rank_environment(agent, plan, 0, job);
  for (const char* gone : {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_ID", "SLURM_NTASKS"})
    EXPECT_FALSE(env.has(gone)) << gone;
  EXPECT_EQ(env.get("SLURM_JOB_ID"), "42");
  EXPECT_EQ(env.get("SLURM_JOB_NODELIST"), "n[1-2]");
  EXPECT_EQ(env.get("RANK"), "0");
}

TEST(SrunWords, LinesNamingTheNodeComeFirstElseTheLastLines) {
  const std::string out =
      "srun: error: node3: task 2: Exited with exit code 1\n"
      "srun: Terminating StepId=5.0\n"
      "srun: error: node13: task 12: Killed\n";
  EXPECT_EQ(srun_words_about(out, "node3"), "error: node3: task 2: Exited with exit code 1");
  EXPECT_EQ(srun_words_about(out, "node9"),
            "error: node3: task 2: Exited with exit code 1 / Terminating StepId=5.0 / error: node13: task 12: Killed");
  EXPECT_EQ(srun_words_about("", "node3"), "");
}

}  // namespace
}  // namespace muster

namespace muster {
namespace {

TEST(SrunLabel, TheTaskTagIsSplitFromTheLineAndSrunsOwnWordsHaveNone) {
  auto [task, text] = split_srun_label("3: hello: world");
  EXPECT_EQ(task, 3u);
  EXPECT_EQ(text, "hello: world");
  auto [padded, rest] = split_srun_label(" 7: ");  // srun pads the tag to the widest task number
  EXPECT_EQ(padded, 7u);
  EXPECT_EQ(rest, "");
  for (std::string_view own : {"srun: error: node2: task 1: Exited with exit code 3", "", "12", "12:x",
                               "99999999999: too many digits"}) {
    auto [none, same] = split_srun_label(own);
    EXPECT_FALSE(none) << own;
    EXPECT_EQ(same, own);
  }
}

}  // namespace
}  // namespace muster
