// Shell completion: bash's completion function driven as bash drives it on TAB, and both
// scripts checked against every flag that `muster SUBCOMMAND --help` lists, so that a new
// flag cannot be left out of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "tests/support/build_paths.h"
#include "tests/support/command_runner.h"

namespace muster::testing {
namespace {

const std::string kBash = source_path("/share/completions/muster.bash");
const std::string kZsh = source_path("/share/completions/_muster");

bool have_bash_completion() {
  if (std::ifstream("/usr/share/bash-completion/bash_completion")) return true;
  if (in_ci()) ADD_FAILURE() << "bash-completion is missing; .ci/run installs it";
  return false;
}

// The candidates bash would offer at the end of `line`.
std::set<std::string> complete(const std::string& line) {
  const std::string dir = std::filesystem::path(muster_binary()).parent_path().string();
  auto r = run_command({"bash", source_path("/tests/e2e/complete.bash"), kBash, line},
                       {"PATH=" + dir + ":/usr/bin:/bin", "HOME=/tmp"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "") << line;
  std::set<std::string> out;
  std::istringstream in(r.out);
  for (std::string word; std::getline(in, word);)
    if (!word.empty()) out.insert(word);
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(Completion, BashCompletesSubcommandsFlagsAndTheirValues) {
  if (!have_bash_completion()) return;
  EXPECT_EQ(complete("muster "), (std::set<std::string>{"doctor", "health", "run", "stacks", "smoke", "topo", "plan", "ping",
                                                         "exec", "hostlist", "bundle", "help", "--help",
                                                         "--version"}));
  EXPECT_EQ(complete("muster help ru"), std::set<std::string>{"run"});
  EXPECT_EQ(complete("muster help h"), (std::set<std::string>{"health", "hostlist"}));
  EXPECT_EQ(complete("muster health --fs"), std::set<std::string>{"--fsroot"});
  EXPECT_EQ(complete("muster doctor --only cluster,he"), std::set<std::string>{"cluster,health"});
  EXPECT_EQ(complete("muster ru"), std::set<std::string>{"run"});
  EXPECT_EQ(complete("muster run --ma"), std::set<std::string>{"--map-by"});
  EXPECT_EQ(complete("muster run --map-by "), (std::set<std::string>{"slot", "node"}));
  EXPECT_EQ(complete("muster run --bind "), (std::set<std::string>{"core", "numa", "none"}));
  EXPECT_EQ(complete("muster smoke --backend "), (std::set<std::string>{"auto", "nccl", "gloo"}));
  EXPECT_EQ(complete("muster exec --tag "), (std::set<std::string>{"host", "pdsh", "none"}));
  EXPECT_EQ(complete("muster run --tag h"), (std::set<std::string>{"host", "host-rank"}));
  EXPECT_EQ(complete("muster doctor --only cluster,ne"), std::set<std::string>{"cluster,network"});
}

TEST(Completion, BashCompletesFilesAndTheHostsOfTheClusterFile) {
  if (!have_bash_completion()) return;
  TempDir dir;
  dir.write("lab.yaml", "nodes:\n  - host: gpu[01-03]\n    slots: 2\n  - host: spare\n");
  dir.write("notes.txt", "");
  EXPECT_EQ(complete("muster run -f " + dir.file("la")), std::set<std::string>{dir.file("lab.yaml")});
  EXPECT_EQ(complete("muster doctor --prometheus " + dir.file("no")), std::set<std::string>{dir.file("notes.txt")});
  // -H offers the cluster file's hosts, host lists expanded, after the last comma.
  EXPECT_EQ(complete("muster run -f " + dir.file("lab.yaml") + " -H "),
            (std::set<std::string>{"gpu01", "gpu02", "gpu03", "spare"}));
  EXPECT_EQ(complete("muster run -f " + dir.file("lab.yaml") + " -H gpu01,gpu0"),
            (std::set<std::string>{"gpu01,gpu01", "gpu01,gpu02", "gpu01,gpu03"}));
  // -f is the cluster file in every command that takes one; hostlist folds with --fold.
  EXPECT_EQ(complete("muster health -f " + dir.file("la")), std::set<std::string>{dir.file("lab.yaml")});
  EXPECT_EQ(complete("muster hostlist --fo"), std::set<std::string>{"--fold"});
  EXPECT_EQ(complete("muster hostlist -"), (std::set<std::string>{"-e", "--expand", "--fold", "-c", "--count",
                                                                  "-h", "--help"}));
}

// Every long flag muster's help lists for a subcommand is in both scripts.
TEST(Completion, BothScriptsKnowEveryFlagOfEverySubcommand) {
  const std::string bash = read_file(kBash), zsh = read_file(kZsh);
  ASSERT_FALSE(bash.empty());
  ASSERT_FALSE(zsh.empty());
  // The flags of the Options section: lines that start with a flag, not examples in prose.
  const std::regex flag("^\\s+(-[a-zA-Z],)?(--[a-z][a-z-]+)");
  for (const char* sub : {"run", "plan", "topo", "exec", "ping", "smoke", "doctor", "hostlist", "bundle"}) {
    auto help = run_muster({sub, "--help"});
    ASSERT_EQ(help.exit_code, 0) << sub;
    // The bash script's flag list for this subcommand: its line in the case statement.
    const std::string key = std::string("        ") + sub + ") flags=\"";
    const size_t at = bash.find(key);
    ASSERT_NE(at, std::string::npos) << sub;
    std::string listed = bash.substr(at, bash.find('\n', at) - at);
    for (const char* shared : {"$cluster", "$remote"}) {
      if (listed.find(shared) == std::string::npos) continue;
      const std::string def = std::string("local ") + (shared + 1) + "=\"";
      const size_t d = bash.find(def);
      ASSERT_NE(d, std::string::npos);
      listed += " " + bash.substr(d, bash.find('\n', d) - d);
    }
    std::replace(listed.begin(), listed.end(), '"', ' ');
    std::istringstream lines(help.out);
    for (std::string text; std::getline(lines, text);) {
      std::smatch m;
      if (!std::regex_search(text, m, flag)) continue;
      const std::string f = m[2];
      if (f == "--help") continue;
      EXPECT_NE((" " + listed + " ").find(" " + f + " "), std::string::npos)
          << "muster.bash does not offer " << f << " for " << sub;
      // zsh's specs read '--flag[description]' or {-f,--flag}'[description]'.
      EXPECT_TRUE(zsh.find(f + "[") != std::string::npos || zsh.find(f + "}'[") != std::string::npos)
          << "_muster does not offer " << f;
    }
  }
  if (run_command({"zsh", "-c", "true"}).exit_code == 0) {
    EXPECT_EQ(run_command({"zsh", "-n", kZsh}).exit_code, 0);
  } else if (in_ci()) {
    ADD_FAILURE() << "zsh is missing; .ci/run installs it";
  }
}

}  // namespace
}  // namespace muster::testing
