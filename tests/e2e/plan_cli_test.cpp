// `muster plan` as users call it.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/command_runner.h"

namespace muster::testing {
namespace {

TEST(PlanCli, JsonHasRanksWithEveryFieldAndTheWorldSize) {
  auto r = run_muster({"plan", "-H", "a:2,b:2", "--map-by", "node", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto plan = nlohmann::json::parse(r.out);
  EXPECT_EQ(plan["world_size"], 4);
  ASSERT_EQ(plan["ranks"].size(), 4u);
  const std::string hosts[] = {"a", "b", "a", "b"};
  for (int i = 0; i < 4; ++i) {
    const auto& rank = plan["ranks"][size_t(i)];
    EXPECT_EQ(rank["rank"], i);
    EXPECT_EQ(rank["host"], hosts[i]);
    EXPECT_EQ(rank["node_rank"], i % 2);
    EXPECT_EQ(rank["local_rank"], i / 2);
    EXPECT_TRUE(rank["gpu"].is_null());
  }
}

// A remote node of `slots: auto` has as many ranks as GPUs, which plan (reaching nothing)
// cannot know: it says so, rather than show the one slot it counts for now.
// -N as srun -N inside a larger allocation: the first N nodes run the job, the rest are spares,
// the same plan as --spares gives.
TEST(PlanCli, NodesHoldsTheRestBackAsSparesAsSparesDoes) {
  auto by_nodes = run_muster({"plan", "-H", "a:2,b:2,c:2", "-N", "2", "--json"});
  ASSERT_EQ(by_nodes.exit_code, 0) << by_nodes.err;
  auto plan = nlohmann::json::parse(by_nodes.out);
  EXPECT_EQ(plan["world_size"], 4);
  EXPECT_EQ(plan["spares"], nlohmann::json::array({"c"}));
  auto by_spares = run_muster({"plan", "-H", "a:2,b:2,c:2", "--spares", "1", "--json"});
  EXPECT_EQ(by_spares.out, by_nodes.out);
  auto table = run_muster({"plan", "-H", "a:2,b:2,c:2", "--nodes", "2"});
  EXPECT_NE(table.out.find("spare runs a left-out node's ranks"), std::string::npos) << table.out;
}

TEST(PlanCli, AutoSlotsOnANodeNotReachedAreKnownWhenReached) {
  TempDir dir;
  dir.write("cluster.yaml", "launch:\n  slots: auto\nnodes:\n  - host: gpu1\n  - host: gpu2\n    slots: 2\n");
  auto r = run_muster({"plan", "-f", dir.file("cluster.yaml")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("world size known when the nodes are reached (at least 3)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gpu1  auto  one rank per GPU, known when reached"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("gpu1  1"), std::string::npos) << r.out;
  auto json = run_muster({"plan", "-f", dir.file("cluster.yaml"), "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  auto plan = nlohmann::json::parse(json.out);
  EXPECT_EQ(plan["world_size_known"], false);
  EXPECT_EQ(plan["slots_known_when_reached"], nlohmann::json::array({"gpu1"}));
}

TEST(PlanCli, TableReadsLikeDisplayMap) {
  TempDir dir;
  dir.write("hosts", "n1 slots=2\nn2 slots=1\n");
  auto r = run_muster({"plan", "--hostfile", dir.file("hosts")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("world size 3, map-by slot"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NODE  HOST  SLOTS RANK  LOCAL GPU\n"
                       "0     n1    2     0     0     -\n"
                       "0     n1    2     1     1     -\n"
                       "1     n2    1     2     0     -\n"), std::string::npos) << r.out;
}

TEST(PlanCli, OnlyOneWayOfNamingTheClusterAtATime) {
  auto r = run_muster({"plan", "-H", "a", "--hostfile", "x"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--hostfile and --hosts cannot be used together"), std::string::npos) << r.err;
}

// `muster doctor -f "$CLUSTER"` with the variable never set: a usage error naming the flag,
// not a PASS for this machine; and nothing is started (run's command would leave its mark).
TEST(PlanCli, AnEmptyClusterFlagIsAnErrorNotThisMachine) {
  TempDir dir;
  for (const auto& command : std::vector<std::string>{"doctor", "ping", "plan", "run", "smoke"})
    for (const auto& [flag, name] : std::vector<std::pair<std::string, std::string>>{
             {"-f", "--cluster"}, {"-H", "--hosts"}, {"--hostfile", "--hostfile"}}) {
      std::vector<std::string> args = {command, flag, ""};
      if (command == "run") args.insert(args.end(), {"--", "touch", dir.file("started")});
      const auto r = run_muster(args);
      EXPECT_EQ(r.exit_code, 2) << command << " " << flag << ": " << r.out << r.err;
      EXPECT_NE(r.err.find(name + ": is empty"), std::string::npos) << command << " " << flag << ": " << r.err;
      EXPECT_NE(r.err.find("leave the flag out to use this machine"), std::string::npos) << r.err;
    }
  EXPECT_FALSE(std::filesystem::exists(dir.file("started")));
  // health's -f names expectations, not nodes: empty is the same mistake.
  const auto health = run_muster({"health", "-f", ""});
  EXPECT_EQ(health.exit_code, 2) << health.out << health.err;
  EXPECT_NE(health.err.find("--cluster: is empty"), std::string::npos) << health.err;
  EXPECT_NE(health.err.find("leave the flag out to check with no expectations"), std::string::npos) << health.err;
}

TEST(Cli, VersionAndHelpWork) {
  auto version = run_muster({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("muster ", 0), 0u);
  auto help = run_muster({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  for (const char* sub : {"run", "plan", "hostlist"})
    EXPECT_NE(help.out.find(sub), std::string::npos) << sub;
  auto none = run_muster({});
  EXPECT_EQ(none.exit_code, 2);
}

TEST(Cli, AnUnknownOptionIsNamedNotTheWholeCommand) {
  auto r = run_muster({"exec", "-H", "localhost", "--frobnicate", "3", "--", "echo", "hi"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "muster: error: unknown option '--frobnicate' for 'muster exec'; see 'muster "
                   "exec --help'\n");
  // exec runs once per node: ranks mean nothing to it.
  auto ranks = run_muster({"exec", "-H", "localhost", "-n", "2", "--", "true"});
  EXPECT_EQ(ranks.exit_code, 2);
  EXPECT_NE(ranks.err.find("unknown option '-n' for 'muster exec'"), std::string::npos) << ranks.err;
  auto tag = run_muster({"exec", "-H", "localhost", "--tag", "rank", "--", "true"});
  EXPECT_EQ(tag.exit_code, 2);
  EXPECT_NE(tag.err.find("--tag: rank not in {host,none,pdsh}"), std::string::npos) << tag.err;
}

// Someone who has never run muster is told where to start: the first step, an example and
// the manual pages.
TEST(Cli, TopLevelHelpGivesAFirstStepAnExampleAndTheManualPages) {
  auto help = run_muster({"--help"});
  ASSERT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("\nFirst step: muster doctor -f cluster.yaml, which checks a cluster end to end\n"),
            std::string::npos) << help.out;
  EXPECT_NE(help.out.find("\nExample: muster run -f cluster.yaml -- python3 train.py\n"), std::string::npos)
      << help.out;
  EXPECT_NE(help.out.find("man muster,"), std::string::npos) << help.out;
}

// git's habit: `muster help run` is `muster run --help`, and `muster help` is `muster --help`.
TEST(Cli, HelpCommandPrintsThatCommandsHelp) {
  auto help_run = run_muster({"help", "run"});
  EXPECT_EQ(help_run.exit_code, 0) << help_run.err;
  EXPECT_EQ(help_run.err, "");
  EXPECT_EQ(help_run.out, run_muster({"run", "--help"}).out);
  EXPECT_EQ(help_run.out.rfind("Usage: muster run [OPTIONS]", 0), std::string::npos);  // after the summary
  EXPECT_NE(help_run.out.find("Usage: muster run [OPTIONS]"), std::string::npos) << help_run.out;
  auto help = run_muster({"help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out, run_muster({"--help"}).out);
  auto misspelt = run_muster({"help", "rn"});
  EXPECT_EQ(misspelt.exit_code, 2);
  EXPECT_EQ(misspelt.err, "muster: error: 'rn' is not a muster command, did you mean 'run'?\n");
  auto two = run_muster({"help", "run", "exec"});
  EXPECT_EQ(two.exit_code, 2);
  EXPECT_EQ(two.err, "muster: error: 'muster help' takes one command, as in 'muster help run'\n");
}

// A misspelt option or command gets the one it was closest to.
TEST(Cli, MisspeltOptionsAndCommandsGetDidYouMean) {
  auto version = run_muster({"--verison"});
  EXPECT_EQ(version.exit_code, 2);
  EXPECT_EQ(version.err, "muster: error: unknown option '--verison', did you mean '--version'?\n");
  auto help = run_muster({"--hlep"});
  EXPECT_EQ(help.err, "muster: error: unknown option '--hlep', did you mean '--help'?\n");
  auto command = run_muster({"doctr"});
  EXPECT_EQ(command.exit_code, 2);
  EXPECT_EQ(command.err, "muster: error: 'doctr' is not a muster command, did you mean 'doctor'?\n");
  auto flag = run_muster({"run", "-H", "localhost", "--tiemout", "3", "--", "true"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_EQ(flag.err, "muster: error: unknown option '--tiemout' for 'muster run', did you mean '--timeout'?\n");
  // A subcommand's flag before the command is still told where it goes.
  auto first = run_muster({"-H", "localhost", "run"});
  EXPECT_EQ(first.exit_code, 2);
  EXPECT_EQ(first.err.rfind("muster: error: '-H': the command comes first", 0), 0u) << first.err;
}

// An empty word ('') is said in words: an empty quote in a message reads as muster's glitch.
TEST(Cli, NoErrorQuotesAnEmptyWord) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{""}, "muster: error: the command is an empty word; the commands are doctor, health, run, stacks, "
             "smoke, topo, plan, ping, exec, hostlist, bundle\n"},
      {{"help", ""}, "muster: error: the command is an empty word; the commands are doctor, health, run, "
                     "stacks, smoke, topo, plan, ping, exec, hostlist, bundle\n"},
      {{"plan", "-H", "localhost", ""}, "muster: error: 'muster plan' takes no argument that is an empty word; "
                                        "see 'muster plan --help'\n"},
      {{"run", "-H", "localhost", "--", ""}, "muster: error: the command to run is an empty word: name a "
                                             "program, as in 'muster run -n 4 -- python3 train.py'\n"},
      {{"exec", "-H", "localhost", "--", ""}, "muster: error: the command to run is an empty word: name a "
                                              "program, as in 'muster exec -f cluster.yaml -- uname -r'\n"},
  };
  for (const auto& [args, said] : cases) {
    auto r = run_muster(args);
    EXPECT_EQ(r.exit_code, 2) << args.size();
    EXPECT_EQ(r.err, said);
    EXPECT_EQ(r.err.find("''"), std::string::npos) << r.err;
  }
}

// exec runs a command once a node: a machine named twice is refused in exec's words, not run's.
TEST(Cli, ExecSaysAMachineListedTwiceWouldRunTheCommandTwice) {
  auto r = run_muster({"exec", "-H", "localhost,localhost", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "muster: error: -H 'localhost,localhost': host 'localhost' is listed twice (first at -H "
                   "'localhost,localhost'); a machine listed twice would run the command twice on one "
                   "machine; list it once\n");
  auto ranks = run_muster({"run", "-H", "localhost,localhost", "--", "true"});
  EXPECT_NE(ranks.err.find("would run duplicate ranks"), std::string::npos) << ranks.err;
}

// pdsh's "host: line", which dshbak and scripts written for pdsh read.
TEST(Cli, ExecTagPdshPrintsLinesAsPdshDoes) {
  auto r = run_muster({"exec", "-H", "localhost", "--tag", "pdsh", "--", "printf", "a\nb c\n"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "localhost: a\nlocalhost: b c\n");
}

// nodeset's -f is not muster's: -f is the cluster file in every command.
TEST(Cli, HostlistFoldsWithFoldAndSaysSoForDashF) {
  auto fold = run_muster({"hostlist", "--fold", "gpu01", "gpu02"});
  EXPECT_EQ(fold.out, "gpu[01-02]\n");
  auto f = run_muster({"hostlist", "-f", "gpu01", "gpu02"});
  EXPECT_EQ(f.exit_code, 2);
  EXPECT_EQ(f.err, "muster: error: 'muster hostlist' has no -f, which is the cluster file in muster; fold "
                   "with --fold\n");
}

// Every --help fits an 80-column terminal: long descriptions wrap under themselves.
TEST(Cli, EveryHelpLineFitsEightyColumns) {
  for (const char* sub : {"", "doctor", "health", "run", "stacks", "smoke", "topo", "plan", "ping", "exec",
                          "hostlist", "bundle"}) {
    auto help = run_muster(*sub ? std::vector<std::string>{sub, "--help"} : std::vector<std::string>{"--help"});
    ASSERT_EQ(help.exit_code, 0) << sub;
    for (const auto& line : help.out_lines()) EXPECT_LE(line.size(), 80u) << "muster " << sub << " --help: " << line;
  }
}

}  // namespace
}  // namespace muster::testing
