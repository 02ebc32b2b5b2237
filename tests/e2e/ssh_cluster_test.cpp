// muster across real sshd hosts: the test cluster of network namespaces (needs root).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "probes/digest.h"
#include "tests/support/build_paths.h"
#include "tests/support/shared_cluster.h"
#include "tests/support/test_cluster.h"

namespace muster::testing {
namespace {

class SshCluster : public SharedCluster<SshCluster> {
 protected:
  void SetUp() override {
    SharedCluster::SetUp();
    if (!IsSkipped() && !HasFatalFailure()) cluster_->trust_host_keys();
  }
  static std::string two_slots() { return cluster_->write_cluster_file("launch:\n  slots: 2\n"); }
};

std::map<std::string, std::vector<std::string>> lines_by_tag(const std::string& text) {
  std::map<std::string, std::vector<std::string>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto close = line.find("] ");
    if (line.empty() || line[0] != '[' || close == std::string::npos) continue;
    out[line.substr(1, close - 1)].push_back(line.substr(close + 2));
  }
  return out;
}

std::set<pid_t> pids_in(const std::string& dir, const std::string& stem) {
  std::set<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().rfind(stem, 0) == 0) {
      std::ifstream in(entry.path());
      pid_t pid = 0;
      if (in >> pid) pids.insert(pid);
    }
  return pids;
}

// --- muster exec --------------------------------------------------------------------------

TEST_F(SshCluster, ExecRunsOnEveryHostWithItsOwnHostname) {
  auto r = cluster_->muster({"exec", "-f", cluster_->write_cluster_file(), "--", "hostname"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto by_host = lines_by_tag(r.out);
  ASSERT_EQ(by_host.size(), 4u) << r.out;
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(by_host[cluster_->host(i)], std::vector<std::string>{cluster_->host(i)}) << r.out;
}

TEST_F(SshCluster, ExecWithoutPrefixPrintsBareLinesLikePdshN) {
  for (const auto& flag : std::vector<std::vector<std::string>>{{"-N"}, {"--no-prefix"}, {"--tag", "none"}}) {
    std::vector<std::string> args = {"exec", "-f", cluster_->write_cluster_file()};
    args.insert(args.end(), flag.begin(), flag.end());
    args.insert(args.end(), {"--", "hostname"});
    auto r = cluster_->muster(args);
    ASSERT_EQ(r.exit_code, 0) << flag[0] << ": " << r.err;
    auto lines = r.out_lines();
    std::sort(lines.begin(), lines.end());
    EXPECT_EQ(lines, (std::vector<std::string>{"node1", "node2", "node3", "node4"})) << flag[0];
  }
}

// Scripts written for pdsh pipe its output through dshbak: --tag pdsh prints what it reads.
TEST_F(SshCluster, ExecTagPdshIsReadByDshbak) {
  if (access("/usr/bin/dshbak", X_OK) != 0) {
    if (in_ci()) FAIL() << "dshbak (pdsh) is missing; share/debian-packages.txt lists pdsh";
    GTEST_SKIP() << "pdsh's dshbak is not installed (apt-get install pdsh)";
  }
  std::vector<std::string> argv = cluster_->muster_argv(
      {"exec", "-f", cluster_->write_cluster_file(), "--tag", "pdsh", "--", "echo", "same words"});
  std::string command;
  for (const auto& word : argv) command += "'" + word + "' ";
  auto r = run_command({"sh", "-c", command + "| /usr/bin/dshbak -c"}, {}, std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "----------------\nnode[1-4]\n----------------\nsame words\n");
}

TEST_F(SshCluster, ExecFoldPrintsIdenticalOutputOnceUnderTheFoldedHosts) {
  auto r = cluster_->muster({"exec", "-f", cluster_->write_cluster_file(), "--fold", "--",
                             "echo", "same everywhere"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "---------------\nnode[1-4] (4)\n---------------\nsame everywhere\n");
}

TEST_F(SshCluster, ExecExitStatusIsTheLargestRemoteOne) {
  // nodeN exits N: the largest is 4, from node4.
  auto r = cluster_->muster({"exec", "-f", cluster_->write_cluster_file(), "--", "sh", "-c",
                             "exit $(hostname | tr -dc 0-9)"});
  EXPECT_EQ(r.exit_code, 4) << r.err;
}

// sshd reports a command killed by a signal with the signal, not a status: muster gives
// 128+N, as a shell does (pdsh and clush report 255 or nothing).
TEST_F(SshCluster, ExecOfACommandKilledByASignalExitsWith128PlusItsNumber) {
  auto r = cluster_->muster({"exec", "-f", cluster_->write_cluster_file(), "--", "sh", "-c",
                             "kill -TERM $$"});
  EXPECT_EQ(r.exit_code, 128 + SIGTERM) << r.err;
  EXPECT_EQ(r.err.find("without a status"), std::string::npos) << r.err;
}

TEST_F(SshCluster, ArgumentsArriveVerbatim) {
  const std::vector<std::string> words = {"a b", "it's", "\"dq\"", "$(id -u)", "`id -u`",
                                          "x;y", "line1\nline2", "h\xc3\xa9llo \xe2\x9c\x93", "*", ""};
  std::vector<std::string> args = {"exec", "-f", cluster_->write_cluster_file(), "--",
                                   "printf", "<%s>\\n"};
  args.insert(args.end(), words.begin(), words.end());
  auto r = cluster_->muster(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string expected;
  for (const auto& w : words) expected += "<" + w + ">\n";
  auto by_host = lines_by_tag(r.out);
  for (int i = 0; i < 4; ++i) {
    std::string got;
    for (const auto& line : by_host[cluster_->host(i)]) got += line + "\n";
    EXPECT_EQ(got, expected) << cluster_->host(i);
  }
}

// Latin-1 bytes (real file names have them) cross the agent protocol as they are: in `run`'s
// argument and exported value, and in `exec`'s argument (ssh and pdsh pass them so).
TEST_F(SshCluster, BytesThatAreNotUtf8ReachEveryNodeAsTheyAre) {
  // Each of the 4 ranks or hosts prints its argument and $LATIN, and only that.
  auto each_prints_them = [](const std::vector<std::string>& command) {
    std::vector<std::string> args = command;
    for (const char* word : {"sh", "-c", "printf '<%s|%s>\\n' \"$1\" \"$LATIN\"", "sh", "\xe9t\xe9"})
      args.push_back(word);
    auto r = cluster_->muster(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto by_tag = lines_by_tag(r.out);
    ASSERT_EQ(by_tag.size(), 4u) << r.out;
    for (const auto& [tag, lines] : by_tag) EXPECT_EQ(lines, std::vector<std::string>{"<\xe9t\xe9|caf\xe9>"}) << tag;
  };
  each_prints_them({"run", "-f", cluster_->write_cluster_file(), "-x", "LATIN=caf\xe9", "--"});
  each_prints_them({"exec", "-f", cluster_->write_cluster_file(), "--", "env", "LATIN=caf\xe9"});
}

// --- failures: each node with its cause -----------------------------------------------------

TEST_F(SshCluster, AStoppedSshdFailsOnlyItsHostAndIsNamed) {
  cluster_->stop_sshd(2);
  auto exec = cluster_->muster({"exec", "-f", cluster_->write_cluster_file(), "--", "hostname"});
  auto run = cluster_->muster({"run", "-f", cluster_->write_cluster_file(), "--", "hostname"});
  cluster_->start_sshd(2);
  EXPECT_EQ(exec.exit_code, 255);
  EXPECT_NE(exec.err.find("muster: error: node3: connection refused"), std::string::npos) << exec.err;
  EXPECT_EQ(lines_by_tag(exec.out).size(), 3u) << exec.out;  // the others still ran
  // run starts nothing unless every node is there, and says so as exec does: 255.
  EXPECT_EQ(run.exit_code, 255);
  EXPECT_NE(run.err.find("node3: connection refused"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("1 of 4 nodes could not be reached; nothing was started"),
            std::string::npos) << run.err;
  EXPECT_TRUE(run.out.empty()) << run.out;
}

TEST_F(SshCluster, EachUnreachableNodeIsNamedWithItsCause) {
  TempDir dir;
  ASSERT_EQ(run_command({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", dir.file("stranger")}).exit_code, 0);
  const std::string common = fmt::format("    ssh: {{user: root, known_hosts: {}, connect_timeout: 2, "
                                         "identity: {}/id_ed25519}}\n",
                                         cluster_->known_hosts(), cluster_->dir());
  dir.write("cluster.yaml",
            "nodes:\n"
            "  - host: ghost\n    address: no-such-host.invalid\n" + common +
            "  - host: " + cluster_->host(0) + "\n    address: " + cluster_->address(0) + "\n" +
            fmt::format("    ssh: {{user: root, known_hosts: {}, identity: {}}}\n",
                        cluster_->known_hosts(), dir.file("stranger")) +
            "  - host: " + cluster_->host(1) + "\n    address: " + cluster_->address(1) + "\n" + common +
            "  - host: " + cluster_->host(2) + "\n    address: " + cluster_->address(2) + "\n" + common);
  cluster_->freeze_sshd(1, true);
  auto r = cluster_->muster({"exec", "-f", dir.file("cluster.yaml"), "--", "hostname"});
  cluster_->freeze_sshd(1, false);
  EXPECT_EQ(r.exit_code, 255);
  EXPECT_NE(r.err.find("ghost: name resolution: cannot resolve 'no-such-host.invalid'"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("node1: authentication: no key was accepted for user 'root'"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("node2: timeout"), std::string::npos) << r.err;
  EXPECT_EQ(lines_by_tag(r.out)[cluster_->host(2)], std::vector<std::string>{cluster_->host(2)});
}

TEST_F(SshCluster, UserSshConfigSuppliesHostNameUserAndIdentity) {
  // libssh reads the ~/.ssh/config of the user's passwd entry, so this test adds a block
  // to it for a host alias nobody else uses, and puts the file back afterwards.
  const std::string config = "/root/.ssh/config";
  std::filesystem::create_directories("/root/.ssh");
  std::string saved;
  bool existed = std::filesystem::exists(config);
  if (existed) {
    std::ifstream in(config);
    std::stringstream s;
    s << in.rdbuf();
    saved = s.str();
  }
  const std::string alias = fmt::format("muster-test-alias-{}", getpid());
  {
    std::ofstream out(config, std::ios::app);
    out << "\nHost " << alias << "\n  HostName " << cluster_->address(0) << "\n  User root\n"
        << "  IdentityFile " << cluster_->dir() << "/id_ed25519\n";
  }
  TempDir dir;
  dir.write("cluster.yaml", fmt::format("ssh: {{known_hosts: {}}}\nnodes:\n  - host: {}\n",
                                        cluster_->known_hosts(), alias));
  auto r = cluster_->muster({"exec", "-f", dir.file("cluster.yaml"), "--", "hostname"});
  if (existed) std::ofstream(config) << saved;
  else std::filesystem::remove(config);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[" + alias + "] " + cluster_->host(0) + "\n");
}

TEST_F(SshCluster, AChangedHostKeyIsRefusedUnderBothPolicies) {
  cluster_->change_host_key(1);
  for (const char* policy : {"strict", "accept-new"}) {
    auto r = cluster_->muster({"exec", "-f", cluster_->write_cluster_file("", policy), "--", "true"});
    EXPECT_EQ(r.exit_code, 255) << policy;
    EXPECT_NE(r.err.find("node2: host key: the host key CHANGED: the server offers ssh-ed25519 "
                         "SHA256:"), std::string::npos) << policy << "\n" << r.err;
    EXPECT_NE(r.err.find("ssh-keygen -R " + cluster_->address(1)), std::string::npos) << r.err;
  }
}

TEST_F(SshCluster, AnUnknownHostKeyIsRefusedStrictlyAndRecordedWithAcceptNew) {
  cluster_->trust_host_keys(/*except=*/3);
  auto strict = cluster_->muster({"exec", "-f", cluster_->write_cluster_file(), "--", "true"});
  EXPECT_EQ(strict.exit_code, 255);
  EXPECT_NE(strict.err.find("node4: host key: unknown host key ssh-ed25519 SHA256:"),
            std::string::npos) << strict.err;
  EXPECT_NE(strict.err.find("ssh-keyscan -t ssh-ed25519 " + cluster_->address(3)),
            std::string::npos) << strict.err;
  auto accept = cluster_->muster({"exec", "-f", cluster_->write_cluster_file("", "accept-new"),
                                  "--", "true"});
  EXPECT_EQ(accept.exit_code, 0) << accept.err;
  std::ifstream known(cluster_->known_hosts());
  std::stringstream text;
  text << known.rdbuf();
  EXPECT_NE(text.str().find(cluster_->address(3)), std::string::npos) << text.str();
  // Once recorded, strict accepts it too.
  EXPECT_EQ(cluster_->muster({"exec", "-f", cluster_->write_cluster_file(), "--", "true"}).exit_code, 0);
}

// --- muster run -f ------------------------------------------------------------------------

TEST_F(SshCluster, RunPlacesRanksOnTheirHostsWithTheirEnvironment) {
  auto r = cluster_->muster({"run", "-f", two_slots(), "-x", "WORDS=a b $(c) 'd'", "--", "sh",
                             "-c",
                             "echo $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK "
                             "$(hostname) $MASTER_ADDR $OMPI_COMM_WORLD_RANK \"[$WORDS]\""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto by_rank = lines_by_tag(r.out);
  ASSERT_EQ(by_rank.size(), 8u) << r.out;
  for (int rank = 0; rank < 8; ++rank) {
    ASSERT_EQ(by_rank[std::to_string(rank)].size(), 1u);
    EXPECT_EQ(by_rank[std::to_string(rank)][0],
              fmt::format("{} {} 8 2 {} node{} {} {} [a b $(c) 'd']", rank, rank % 2, rank / 2,
                          rank / 2 + 1, cluster_->address(0), rank));
  }
}

// Runs muster ARGS in the head's namespace from directory `cwd`, as a user who typed
// `cd cwd && muster ...`; with `private_to_head` set, from `cwd`/local instead, made on a
// tmpfs over `cwd` that only the head's mount namespace sees: a disk of the head's own,
// which the nodes lack.
CommandResult muster_from(const TestCluster& cluster, const std::string& cwd,
                          const std::vector<std::string>& args, bool private_to_head = false) {
  std::vector<std::string> argv = {
      "unshare", "--mount", "--propagation", "private", "sh", "-c",
      private_to_head ? "mount -t tmpfs muster-head \"$1\" && mkdir \"$1/local\" && cd \"$1/local\" && shift && exec \"$@\""
                      : "cd \"$1\" && shift && exec \"$@\"",
      "sh", cwd};
  for (auto& word : cluster.muster_argv(args)) argv.push_back(std::move(word));
  return run_command(argv, {}, std::chrono::seconds(180));
}

std::vector<std::string> warnings_in(const std::string& err) {
  std::vector<std::string> out;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("muster: warning: ", 0) == 0) out.push_back(line);
  return out;
}

// `cd ~/project && muster run -- python3 train.py` on a shared file system: every rank starts
// in ~/project, as mpirun's and srun's do, not in $HOME. (The test hosts share this machine's
// file system, so a directory made here exists on each.)
TEST_F(SshCluster, RunStartsEveryRankInTheCallersDirectory) {
  TempDir project;
  auto r = muster_from(*cluster_, project.path(), {"run", "-f", two_slots(), "--", "pwd"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto by_rank = lines_by_tag(r.out);
  ASSERT_EQ(by_rank.size(), 8u) << r.out;
  for (const auto& [rank, lines] : by_rank) EXPECT_EQ(lines, std::vector<std::string>{project.path()}) << rank;
  EXPECT_TRUE(warnings_in(r.err).empty()) << r.err;
}

// A caller's directory on a disk of the head's own: the ranks start in $HOME, as mpirun's
// remote ranks do, and one warning names every node that did so.
TEST_F(SshCluster, RunStartsInHomeWhereTheCallersDirectoryIsMissingAndSaysWhereOnce) {
  TempDir outside;
  const std::string local_disk = outside.file("local");  // only in the head's view
  auto r = muster_from(*cluster_, outside.path(), {"run", "-f", two_slots(), "--", "sh", "-c", "echo \"$(pwd) $HOME\""},
                       /*private_to_head=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto by_rank = lines_by_tag(r.out);
  ASSERT_EQ(by_rank.size(), 8u) << r.out;
  for (const auto& [rank, lines] : by_rank) {
    ASSERT_EQ(lines.size(), 1u);
    const std::string pwd = lines[0].substr(0, lines[0].find(' ')), home = lines[0].substr(lines[0].find(' ') + 1);
    EXPECT_FALSE(home.empty());
    EXPECT_EQ(pwd, home) << rank;
  }
  EXPECT_EQ(warnings_in(r.err), std::vector<std::string>{fmt::format(
                                    "muster: warning: '{}' cannot be entered on node[1-4]: the ranks there "
                                    "start in $HOME; --chdir DIR names a directory every node has",
                                    local_disk)})
      << r.err;
}

// --chdir names where every rank starts, whatever the caller's directory; a node without it
// fails to start its ranks, as srun -D and mpirun --wdir do.
TEST_F(SshCluster, RunChdirStartsEveryRankThereAndFailsWhereItIsMissing) {
  TempDir x;
  auto r = muster_from(*cluster_, "/", {"run", "-f", two_slots(), "--chdir", x.path(), "--", "pwd"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto by_rank = lines_by_tag(r.out);
  ASSERT_EQ(by_rank.size(), 8u) << r.out;
  for (const auto& [rank, lines] : by_rank) EXPECT_EQ(lines, std::vector<std::string>{x.path()}) << rank;

  auto missing = muster_from(*cluster_, "/", {"run", "-f", two_slots(), "--chdir", x.file("gone"), "--", "pwd"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("cannot enter '" + x.file("gone") + "'"), std::string::npos) << missing.err;
}

TEST_F(SshCluster, ReportBindingsNamesEveryRemoteRanksCpus) {
  auto r = cluster_->muster({"run", "-f", two_slots(), "--report-bindings", "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 8; ++rank)
    EXPECT_NE(r.err.find(fmt::format("muster: rank {} (node{}) bound to CPUs ", rank, rank / 2 + 1)),
              std::string::npos) << r.err;
}

TEST_F(SshCluster, ARankFailingOnOneHostTearsDownEveryHost) {
  TempDir dir;
  auto r = cluster_->muster({"run", "-f", two_slots(), "--grace", "2", "--", "sh", "-c",
                             "echo $$ > " + dir.path() + "/pid.$RANK; "
                             "if [ $RANK = 5 ]; then " + once_all_pids_written(dir.path(), 8) + "exit 3; fi; "
                             "exec sleep 600"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("muster: rank 5 (node3) exited with status 3; stopped 7 other ranks"),
            std::string::npos) << r.err;
  auto pids = pids_in(dir.path(), "pid.");
  EXPECT_EQ(pids.size(), 8u);
  for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid)) << pid;
}

// Starts 4 hosts x 2 ranks that record their pids and sleep; returns once all 8 run.
std::unique_ptr<RunningCommand> start_sleeping_job(TestCluster& cluster, const std::string& file,
                                                   const TempDir& dir) {
  auto head = std::make_unique<RunningCommand>(cluster.muster_argv(
      {"run", "-f", file, "--", "sh", "-c", "echo $$ > " + dir.path() + "/pid.$RANK; exec sleep 600"}));
  EXPECT_TRUE(wait_until([&] { return pids_in(dir.path(), "pid.").size() == 8; },
                         std::chrono::milliseconds(60000)));
  return head;
}

bool all_gone_within(const std::set<pid_t>& pids, std::chrono::milliseconds limit) {
  return wait_until([&] {
    for (pid_t pid : pids)
      if (process_alive(pid)) return false;
    return true;
  }, limit);
}

TEST_F(SshCluster, KillingTheHeadWithSigkillLeavesNoRankOnAnyHost) {
  TempDir dir;
  auto head = start_sleeping_job(*cluster_, two_slots(), dir);
  head->signal(SIGKILL);
  head->wait();
  // Within 10 s every agent has noticed its channel close and stopped its ranks.
  auto pids = pids_in(dir.path(), "pid.");
  EXPECT_EQ(pids.size(), 8u);
  EXPECT_TRUE(all_gone_within(pids, std::chrono::milliseconds(10000)));
  for (pid_t pid : pids) EXPECT_FALSE(process_alive(pid)) << "rank process " << pid << " survived";
}

TEST_F(SshCluster, ACutNetworkMakesEveryAgentStopItsRanks) {
  TempDir dir;
  auto head = start_sleeping_job(*cluster_, two_slots(), dir);
  // No FIN, no RST: packets to the head just vanish, as when a switch dies.
  const std::string head_address = cluster_->address(0).substr(0, cluster_->address(0).rfind('.')) + ".254";
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(cluster_->on_host(i, {"ip", "route", "add", "blackhole", head_address + "/32"}).exit_code, 0);
  auto pids = pids_in(dir.path(), "pid.");
  EXPECT_EQ(pids.size(), 8u);
  bool all_gone = all_gone_within(pids, std::chrono::milliseconds(20000));
  for (int i = 0; i < 4; ++i)
    cluster_->on_host(i, {"ip", "route", "del", "blackhole", head_address + "/32"});
  EXPECT_TRUE(all_gone) << "ranks still alive 20 s after the network to the head was cut";
  head->signal(SIGKILL);
  head->wait();
}

TEST_F(SshCluster, MusterIsShippedToNodesThatLackItAndRefusedWithNoShip) {
  auto version = run_muster({"--version"});
  const std::string id = version.out.substr(version.out.find("build ") + 6, 40);
  const std::string cached = "/root/.cache/muster/" + id;
  std::error_code ignored;
  std::filesystem::remove_all(std::filesystem::canonical(cached, ignored), ignored);
  std::filesystem::remove(cached, ignored);
  auto refused = cluster_->muster({"run", "-f", cluster_->write_cluster_file(), "--no-ship", "--",
                                   "true"});
  EXPECT_EQ(refused.exit_code, 255);
  EXPECT_NE(refused.err.find("node1: remote command: no muster bundle of this build (" + id + ")"),
            std::string::npos) << refused.err;
  auto shipped = cluster_->muster({"run", "-f", cluster_->write_cluster_file(), "--", "true"});
  EXPECT_EQ(shipped.exit_code, 0) << shipped.err;
  ASSERT_TRUE(std::filesystem::exists(cached + "/complete"));
  EXPECT_EQ(sha256_file(cached + "/muster"), sha256_file(muster_node_program()));
  // With the bundle there, --no-ship starts it: nothing more is copied.
  auto cached_run = cluster_->muster({"run", "-f", cluster_->write_cluster_file(), "--no-ship", "--",
                                      "true"});
  EXPECT_EQ(cached_run.exit_code, 0) << cached_run.err;
}

TEST_F(SshCluster, TorchGlooAllReduceAcrossFourHostsTimesTwoRanks) {
  if (run_command({"/usr/bin/python3", "-c", "import torch.distributed"}).exit_code != 0) {
    if (in_ci()) FAIL() << "python3-torch is missing";
    GTEST_SKIP() << "python3-torch is not installed";
  }
  // No GLOO_SOCKET_IFNAME given: muster picks the interface from its measurements.
  auto r = cluster_->muster({"run", "-f", two_slots(), "--timeout", "240", "--", "/usr/bin/python3",
                             source_path("/tests/e2e/torch_allreduce.py")}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto by_rank = lines_by_tag(r.out);
  ASSERT_EQ(by_rank.size(), 8u) << r.out;
  for (int rank = 0; rank < 8; ++rank)
    EXPECT_EQ(by_rank[std::to_string(rank)].at(0),
              fmt::format("rank {} of 8 local_rank {} sum 36 expected 36 wrong 0", rank, rank % 2));
}

}  // namespace
}  // namespace muster::testing

namespace muster::testing {
namespace {

TEST_F(SshCluster, SmokeOnGlooAcrossFourHostsTimesTwoRanks) {
  auto r = cluster_->muster({"smoke", "-f", two_slots(), "--max-bytes", "256K", "--split", "node",
                             "--json"}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["backend"], "gloo");
  EXPECT_EQ(report["world_size"], 8);
  std::set<std::string> hosts;
  for (const auto& h : report["hellos"]) hosts.insert(h["host"].get<std::string>());
  EXPECT_EQ(hosts, (std::set<std::string>{"node1", "node2", "node3", "node4"}));
  std::set<std::string> groups;
  for (const auto& row : report["results"]) {
    groups.insert(row["group"].get<std::string>());
    EXPECT_EQ(row["wrong"], 0);
  }
  EXPECT_EQ(groups, (std::set<std::string>{"world", "node 0", "node 1", "node 2", "node 3",
                                           "across nodes"}));
}

}  // namespace
}  // namespace muster::testing
