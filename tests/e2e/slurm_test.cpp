// muster inside Slurm allocations: a real slurmctld and one slurmd per test host (needs root
// and Debian's slurm-wlm and munge). No cluster file anywhere: the allocation is the cluster.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "launcher/cluster/hostlist.h"
#include "tests/support/build_paths.h"
#include "tests/support/fake_gpus.h"
#include "tests/support/node_tree.h"
#include "tests/support/shared_cluster.h"
#include "tests/support/slurm_cluster.h"

namespace muster::testing {
namespace {

// Slurm's daemons (slurmctld, a slurmd per host) on one four-host test cluster for the suite.
class SlurmTestCluster : public SharedCluster<SlurmTestCluster, SlurmCluster> {
 protected:
  // Processes of muster's (agents, ranks marked with `mark`) still on host i.
  static std::vector<pid_t> left_on(int i, const std::string& mark) {
    std::vector<pid_t> out;
    for (pid_t pid : cluster_->hosts().processes_on(i)) {
      if (process_file(pid, "environ").find(mark) != std::string::npos) out.push_back(pid);
    }
    return out;
  }
  static bool nothing_left(const std::string& mark) {
    return wait_until([&] {
      for (int i = 0; i < cluster_->hosts().size(); ++i)
        if (!left_on(i, mark).empty()) return false;
      return true;
    }, std::chrono::seconds(20));
  }
};

TEST_F(SlurmTestCluster, PlanTakesTheNodesAndSlotsFromTheAllocation) {
  auto r = run_command(cluster_->salloc_muster(4, {"plan"}, {"--ntasks-per-node=2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Slurm allocation"), std::string::npos) << r.out;
  for (int i = 0; i < 4; ++i)
    EXPECT_NE(r.out.find(cluster_->hosts().host(i)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("world size 8"), std::string::npos) << r.out;
}

// srun starts every node itself: --fanout, which paces SSH handshakes, would do nothing there
// and is refused by name before anything starts (before, it was silently ignored).
TEST_F(SlurmTestCluster, FanoutIsRefusedUnderSlurmWhereItWouldDoNothing) {
  auto r = run_command(cluster_->salloc_muster(4, {"run", "--fanout", "4", "--", "true"}));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--fanout paces SSH handshakes"), std::string::npos) << r.err;
}

TEST_F(SlurmTestCluster, RunStartsOneRankPerSlotWithTheJobsVariablesButNotTheAgentsTaskIds) {
  auto r = run_command(cluster_->salloc_muster(
      4, {"run", "--", "sh", "-c",
          "echo \"rank=$RANK host=$(hostname) job=${SLURM_JOB_ID:-unset} procid=${SLURM_PROCID:-unset} "
          "localid=${SLURM_LOCALID:-unset} secret=${MUSTER_AGENT_SECRET:-unset}\""}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::set<std::string> hosts;
  for (int rank = 0; rank < 4; ++rank) {
    auto at = r.out.find(fmt::format("rank={} host=", rank));
    ASSERT_NE(at, std::string::npos) << r.out;
    std::istringstream line(r.out.substr(at));
    std::string rank_word, host_word, job_word, procid, localid, secret;
    line >> rank_word >> host_word >> job_word >> procid >> localid >> secret;
    hosts.insert(host_word);
    EXPECT_NE(job_word, "job=unset") << "the allocation's job id is the rank's too";
    EXPECT_EQ(procid, "procid=unset") << "srun started the agent, not the rank";
    EXPECT_EQ(localid, "localid=unset");
    EXPECT_EQ(secret, "secret=unset") << "the agents' secret must not reach the ranks";
  }
  EXPECT_EQ(hosts.size(), 4u) << r.out;
}

// Under Slurm too, each rank starts where --chdir says (srun's own -D), the agents' step
// standing wherever it stands.
TEST_F(SlurmTestCluster, RunChdirStartsEveryRankThere) {
  TempDir x;
  auto r = run_command(cluster_->salloc_muster(4, {"run", "--chdir", x.path(), "--", "pwd"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(r.out.find(fmt::format("[{}] {}\n", rank, x.path())), std::string::npos) << r.out;
}

// Latin-1 bytes (real file names have them) reach the ranks through Slurm's call back as they
// are, in run's argument and exported value and in exec's argument.
TEST_F(SlurmTestCluster, BytesThatAreNotUtf8ReachTheRanksAsTheyAre) {
  const std::vector<std::string> print = {"sh", "-c", "printf '<%s|%s>\\n' \"$1\" \"$LATIN\"", "sh",
                                          "\xe9t\xe9"};
  std::vector<std::string> run = {"run", "-x", "LATIN=caf\xe9", "--"};
  run.insert(run.end(), print.begin(), print.end());
  auto r = run_command(cluster_->salloc_muster(2, run));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_NE(r.out.find(fmt::format("[{}] <\xe9t\xe9|caf\xe9>\n", rank)), std::string::npos) << r.out;

  std::vector<std::string> exec = {"exec", "--", "env", "LATIN=caf\xe9"};
  exec.insert(exec.end(), print.begin(), print.end());
  auto e = run_command(cluster_->salloc_muster(2, exec));
  ASSERT_EQ(e.exit_code, 0) << e.out << e.err;
  size_t nodes = 0;
  for (size_t at = 0; (at = e.out.find("] <\xe9t\xe9|caf\xe9>\n", at)) != std::string::npos; ++at) ++nodes;
  EXPECT_EQ(nodes, 2u) << e.out;
}

TEST_F(SlurmTestCluster, SmokeAndDoctorPassInsideTheAllocation) {
  auto smoke = run_command(cluster_->salloc_muster(4, {"smoke", "--max-bytes", "64K"}, {"--ntasks-per-node=2"}));
  EXPECT_EQ(smoke.exit_code, 0) << smoke.out << smoke.err;
  EXPECT_NE(smoke.out.find("8 ranks"), std::string::npos) << smoke.out;
  auto doctor = run_command(cluster_->salloc_muster(4, {"doctor"}));
  EXPECT_EQ(doctor.exit_code, 0) << doctor.out << doctor.err;
}

TEST_F(SlurmTestCluster, SbatchRunsDoctorAndWritesJunit) {
  TempDir dir;
  std::filesystem::permissions(dir.path(), std::filesystem::perms(0755));
  const std::string junit = dir.file("doctor.xml");
  dir.write("job.sh", fmt::format("#!/bin/sh\n#SBATCH -N 4\n#SBATCH -o {}/job.out\n{} doctor --junit {}\n",
                                  dir.path(), muster_binary(), junit));
  auto r = cluster_->run({"sbatch", "--parsable", "--wait", dir.file("job.sh")}, 180);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << dir.read("job.out");
  ASSERT_TRUE(std::filesystem::exists(junit)) << dir.read("job.out");
  const std::string xml = dir.read("doctor.xml");
  EXPECT_NE(xml.find("<testsuites"), std::string::npos) << xml;
  EXPECT_EQ(xml.find("<failure"), std::string::npos) << xml;
}

TEST_F(SlurmTestCluster, TorchGlooAllReduceThroughMusterRun) {
  if (access("/usr/bin/python3", X_OK) != 0 ||
      run_command({"/usr/bin/python3", "-c", "import torch.distributed"}).exit_code != 0) {
    if (in_ci()) FAIL() << "python3-torch is missing";
    GTEST_SKIP() << "python3-torch is missing";
  }
  auto r = run_command(cluster_->salloc_muster(
      4, {"run", "--", "/usr/bin/python3", source_path("/tests/e2e/torch_allreduce.py")},
      {"--ntasks-per-node=2"}), {}, std::chrono::seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("expected 36"), std::string::npos) << r.out;
}

// Under Slurm the agents (srun's step) read their ranks' stacks as over SSH: at --stall, the
// rank asleep outside the all-reduce is named with its node, and the job goes on to its end.
TEST_F(SlurmTestCluster, AtAStallTheRankOutsideTheAllReduceIsNamedWithItsNode) {
  if (run_command({"/usr/bin/python3", "-c", "import torch.distributed"}).exit_code != 0) {
    if (in_ci()) FAIL() << "python3-torch is missing";
    GTEST_SKIP() << "python3-torch is missing";
  }
  // Rank 5 sleeps 20 s once every rank is in place: the stall is 6 s of silence after that,
  // and its report must come before rank 5 wakes. The job then ends by itself.
  auto r = run_command(cluster_->salloc_muster(4, {"run", "--stall", "6", "--timeout", "120", "--", "/usr/bin/python3",
                                                   source_path("/tests/e2e/stacks/hang.py"), "finish", "20"},
                                               {"--ntasks-per-node=2"}),
                       {}, std::chrono::seconds(240));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  size_t done = 0;
  for (const auto& line : r.out_lines()) done += line.find("done 8") != std::string::npos;
  EXPECT_EQ(done, 8u) << r.out;
  EXPECT_NE(r.err.find("when no rank had written a line for the --stall time"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 5 (" + cluster_->hosts().host(2) + ") is not in all_reduce ("), std::string::npos)
      << r.err;
}

// mpi4py over Open MPI inside an allocation: the agents' own step serves PMIx (srun starts
// them with --mpi=none), the fences go through the head, and the world is one of 8.
TEST_F(SlurmTestCluster, Mpi4pyRanksAreOneWorldUnderTheAllocation) {
  if (run_command({"/usr/bin/python3", "-c", "import mpi4py"}).exit_code != 0) {
    if (in_ci()) FAIL() << "mpi4py is missing (apt-get install python3-mpi4py)";
    GTEST_SKIP() << "needs python3-mpi4py";
  }
  auto r = run_command(cluster_->salloc_muster(
      4, {"run", "--tag", "none", "--timeout", "120", "--", "/usr/bin/python3",
          source_path("/tests/e2e/mpi/mpi4py_hello.py")},
      {"--ntasks-per-node=2"}), {}, std::chrono::seconds(240));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> lines, expected;
  for (const auto& line : r.out_lines())
    if (line.rfind("rank ", 0) == 0) lines.push_back(line);
  for (int rank = 0; rank < 8; ++rank) expected.push_back(fmt::format("rank {} of 8 local {} wrong 0", rank, rank % 2));
  std::sort(lines.begin(), lines.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(lines, expected) << r.err;
}

TEST_F(SlurmTestCluster, ANodeLostMidJobEndsItNamingTheNodeAndNothingIsLeft) {
  const std::string mark = "MUSTER_TEST_MARK=lost-" + std::to_string(getpid());
  RunningCommand head(cluster_->salloc_muster(
      4, {"run", "--heartbeat-timeout", "5", "-x", mark, "--", "sh", "-c", "while :; do echo tick; sleep 0.2; done"}));
  ASSERT_TRUE(wait_until([&] { return !left_on(2, mark).empty(); }, std::chrono::seconds(30)))
      << "no rank started on " << cluster_->hosts().host(2);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  cluster_->lose_host(2);
  auto r = head.wait(std::chrono::seconds(60));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.exit_code, 255) << "a lost node is exit status 255, as over SSH";
  EXPECT_NE(r.err.find("lost contact with " + cluster_->hosts().host(2)), std::string::npos) << r.err;
  EXPECT_TRUE(nothing_left(mark)) << "ranks were left behind";
  // The lost node comes back for the tests after this one.
  delete cluster_;
  cluster_ = new SlurmCluster(4);
}

// Under Slurm a rank that always fails is restarted in place over the same step's agents, each
// attempt told its count, until the restarts are spent; then the rank's own status.
TEST_F(SlurmTestCluster, ARankThatAlwaysFailsIsRestartedInPlaceUntilTheRestartsAreSpent) {
  const std::string mark = "MUSTER_TEST_MARK=restarts-" + std::to_string(getpid());
  auto r = run_command(cluster_->salloc_muster(
      2, {"run", "--restarts", "2", "-x", mark, "--", "sh", "-c",
          "echo count=$MUSTER_RESTART_COUNT; if [ $RANK = 1 ]; then exit 3; fi; sleep 30"}));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  for (int count = 0; count < 3; ++count)
    EXPECT_NE(r.out.find(fmt::format("[1] count={}", count)), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("muster: 3 attempts:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("none: the 2 restarts were spent"), std::string::npos) << r.err;
  EXPECT_TRUE(nothing_left(mark)) << "ranks were left behind";
}

// A fake agent that calls the head back without the session's secret (the address and port
// are on srun's command line, which every local user reads) gets the head's challenge and
// nothing more: no proof, no spec. The job it tried to join runs on unharmed.
TEST_F(SlurmTestCluster, AFakeAgentWithoutTheSecretGetsNothingFromTheHeadBeyondItsChallenge) {
  const std::string mark = "MUSTER_TEST_MARK=fake-agent-" + std::to_string(getpid());
  RunningCommand job(cluster_->salloc_muster(2, {"run", "-x", mark, "--", "sleep", "6"}));
  std::string heads;
  ASSERT_TRUE(wait_until([&] {
    for (pid_t pid : processes_running({"srun"})) {
      std::string cmdline = process_file(pid, "cmdline");
      std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
      const size_t at = cmdline.find("--call-back ");
      if (at == std::string::npos) continue;  // the cluster suites run one at a time: this is ours
      heads = cmdline.substr(at + 12, cmdline.find(' ', at + 12) - at - 12);
      return true;
    }
    return false;
  }, std::chrono::seconds(30))) << "no srun step of muster's agents";
  const std::string head = heads.substr(0, heads.find(','));
  const std::string fake_agent =
      "import os, socket\n"
      "host, port = '" + head + "'.rsplit(':', 1)\n"
      "s = socket.create_connection((host, int(port)), 5)\n"
      "s.settimeout(15)\n"
      "challenge = b''\n"
      "while len(challenge) < 16:\n"
      "    more = s.recv(16 - len(challenge))\n"
      "    if not more: break\n"
      "    challenge += more\n"
      "s.sendall(os.urandom(48) + b'" + cluster_->hosts().host(0) + "\\n')\n"
      "rest = b''\n"
      "while True:\n"
      "    try:\n"
      "        more = s.recv(65536)\n"
      "    except ConnectionResetError:\n"
      "        break  # closed with our name unread: refused all the same\n"
      "    if not more: break\n"
      "    rest += more\n"
      "print(len(challenge), len(rest))\n";
  const auto fake = run_command(cluster_->head_command({"/usr/bin/python3", "-c", fake_agent}), {},
                                std::chrono::seconds(60));
  EXPECT_EQ(fake.out, "16 0\n") << fake.err;
  const auto r = job.wait(std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A node the allocation lists but srun cannot reach (its route to the controller and the
// head is cut): the start fails naming it in srun's words, and no rank starts anywhere.
TEST_F(SlurmTestCluster, ANodeSrunCannotReachIsNamedAndNothingStarts) {
  TestCluster& hosts = cluster_->hosts();
  const std::string head = hosts.address(0).substr(0, hosts.address(0).rfind('.')) + ".254/32";
  hosts.on_host(1, {"ip", "route", "add", "blackhole", head});
  auto r = run_command(cluster_->salloc_muster(4, {"run", "--", "touch", cluster_->dir() + "/started"}), {},
                       std::chrono::seconds(120));
  hosts.on_host(1, {"ip", "route", "del", "blackhole", head});
  EXPECT_NE(r.exit_code, 0);
  // salloc may say "Node failure on node2" first, in its own words, once slurmctld hears of
  // the failed launch: muster's own first line names the node.
  const auto lines = r.err_lines();
  const auto musters_first = std::find_if(lines.begin(), lines.end(),
                                          [](const std::string& line) { return line.rfind("muster: ", 0) == 0; });
  ASSERT_NE(musters_first, lines.end()) << r.err;
  EXPECT_EQ(musters_first->rfind("muster: error: " + hosts.host(1) + ": ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("failed on node " + hosts.host(1)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nothing was started"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(cluster_->dir() + "/started"));
}

TEST_F(SlurmTestCluster, ScancelEndsTheJobAndNothingIsLeft) {
  const std::string mark = "MUSTER_TEST_MARK=scancel-" + std::to_string(getpid());
  RunningCommand head(cluster_->salloc_muster(
      4, {"run", "-x", mark, "--", "sh", "-c", "while :; do echo tick; sleep 0.2; done"},
      {"--job-name=muster-scancel-test"}));
  ASSERT_TRUE(wait_until([&] { return !left_on(3, mark).empty(); }, std::chrono::seconds(30)));
  auto cancel = cluster_->run({"scancel", "--name=muster-scancel-test"});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  auto r = head.wait(std::chrono::seconds(60));
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(nothing_left(mark)) << "ranks were left behind: " << r.err;
  EXPECT_NE(r.err.find("Slurm ended the job's step"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("CANCELLED"), std::string::npos) << r.err;
}

// exec inside an allocation goes through srun, not SSH (the test hosts run no sshd here): each
// line tagged with its node as over SSH, --fold as clush -b, and the exit status pdsh gives.
TEST_F(SlurmTestCluster, ExecRunsThroughSrunWithTheTagsFoldingAndExitStatusOfSsh) {
  TestCluster& hosts = cluster_->hosts();
  auto r = run_command(cluster_->salloc_muster(
      4, {"exec", "--", "sh", "-c",
          "echo \"$(hostname) in step ${SLURM_STEP_ID:-none}\"; [ \"$(hostname)\" != " + hosts.host(2) +
              " ] || exit 3"}));
  EXPECT_EQ(r.exit_code, 3) << "the largest remote status, as pdsh -S: " << r.out << r.err;
  for (int i = 0; i < hosts.size(); ++i) {
    const std::string tag = fmt::format("[{0}] {0} in step ", hosts.host(i));
    const size_t at = r.out.find(tag);
    ASSERT_NE(at, std::string::npos) << r.out << r.err;
    EXPECT_NE(r.out.compare(at + tag.size(), 4, "none"), 0) << "not run by srun: " << r.out;
  }

  auto folded = run_command(cluster_->salloc_muster(4, {"exec", "--fold", "--", "printenv", "SLURM_NNODES"}));
  EXPECT_EQ(folded.exit_code, 0) << folded.err;
  const std::string all = fold_hostlist({hosts.host(0), hosts.host(1), hosts.host(2), hosts.host(3)});
  EXPECT_NE(folded.out.find(all + " (4)\n---------------\n4\n"), std::string::npos) << folded.out;

  auto killed = run_command(cluster_->salloc_muster(2, {"exec", "-N", "--", "sh", "-c", "kill -9 $$"}));
  EXPECT_EQ(killed.exit_code, 128 + SIGKILL) << killed.out << killed.err;

  auto elsewhere = run_command(cluster_->salloc_muster(2, {"exec", "-H", hosts.host(3), "--launcher", "slurm",
                                                         "--", "true"},
                                                     {"--nodelist=" + hosts.host(0) + "," + hosts.host(1)}));
  EXPECT_EQ(elsewhere.exit_code, 2) << elsewhere.err;
  EXPECT_NE(elsewhere.err.find(hosts.host(3) + ": not a node of Slurm's job"), std::string::npos) << elsewhere.err;
}

// A job that holds 4 of each node's 8 GPUs, beside another job that holds the other 4: its
// agents count the 4 Slurm gave the step, and each rank's hello and communicator are on one of
// them (the fake GPUs stand in for the devices; Slurm's gres names them as on a GPU node).
TEST_F(SlurmTestCluster, AJobOnHalfTheGpusOfItsNodesUsesOnlyThose) {
  MUSTER_REQUIRE_FAKE_NCCL();
  FakeGpuMachine machine("eight-gpus-nvswitch");
  TempDir dir;
  const std::string nodes = "--nodelist=" + cluster_->hosts().host(0) + "," + cluster_->hosts().host(1);
  RunningCommand neighbour(cluster_->head_command({"salloc", "-N2", nodes, "--gres=gpu:4", "--quiet", "--",
                                                 "sleep", "120"}));
  ASSERT_TRUE(wait_until([&] {
    return cluster_->run({"squeue", "-h", "-t", "R", "-o", "%i"}).out.find_first_of("0123456789") != std::string::npos;
  }, std::chrono::seconds(30)));
  std::vector<std::string> argv = {"env", "MUSTER_FAKE_NCCL_LOG=" + dir.file("nccl.log"),
                                   "ASAN_OPTIONS=detect_leaks=0"};  // as in GpuCluster.*
  for (const auto& e : machine.environment()) argv.push_back(e);
  // Four tasks a node, one per GPU, as GPU jobs ask.
  for (const std::string word : {"salloc", "-N2", nodes.c_str(), "--gres=gpu:4", "--ntasks-per-node=4",
                                 "--quiet", "--", muster_binary(),
                                 "smoke", "--max-bytes", "4K", "--json"})
    argv.push_back(word);
  auto r = run_command(cluster_->head_command(argv), {}, std::chrono::seconds(120));
  neighbour.signal(SIGTERM);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["world_size"], 8) << "four GPUs on each of two nodes";
  const std::string log = dir.read("nccl.log");
  for (const auto& hello : report["hellos"]) {
    const size_t local = hello["local_rank"].get<size_t>();
    ASSERT_LT(local, 4u);
    const std::string& bus = machine.gpus()[4 + local].bus_id;  // the neighbour holds GPUs 0-3
    EXPECT_EQ(hello["gpu"]["pci_bus_id"], bus) << hello.dump();
    EXPECT_NE(log.find(fmt::format("{} init on {}", hello["rank"].get<int>(), bus)), std::string::npos) << log;
  }
}

// The agents' start is on every job's path: where the nodes see the head's files, srun
// starts muster-node (the node side alone) itself, and hwloc loads no display or libxml2
// plugin in it; none of that reaches the ranks' environment.
TEST_F(SlurmTestCluster, AgentsStartAsThisBuildsMusterNodeWithoutDisplayPlugins) {
  const std::string rank_says =
      "echo \"parent=$(readlink /proc/$PPID/exe) gl=$(grep -c hwloc_gl /proc/$PPID/maps) "
      "blacklist=${HWLOC_PLUGINS_BLACKLIST:-unset}\"";
  auto r = run_command(cluster_->salloc_muster(4, {"run", "--", "sh", "-c", rank_says}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string node_side = muster_node_program();
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(r.out.find(fmt::format("[{}] parent={} gl=0 blacklist=unset", rank, node_side)),
              std::string::npos) << r.out;

  // A node's own choice of plugins stands, and reaches its ranks.
  auto own = run_command(cluster_->head_command(
      {"env", "HWLOC_PLUGINS_BLACKLIST=hwloc_opencl", "salloc", "-N1", "--quiet", muster_binary(),
       "run", "--", "sh", "-c", rank_says}));
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_NE(own.out.find("blacklist=hwloc_opencl"), std::string::npos) << own.out;

  // Beside a muster whose muster-node is another build's, the agents run that muster.
  TempDir copy;
  std::filesystem::copy_file(muster_binary(), copy.file("muster"));
  std::filesystem::copy_file("/bin/true", copy.file("muster-node"));
  auto other = run_command(cluster_->head_command(
      {"salloc", "-N2", "--quiet", copy.file("muster"), "run", "--", "sh", "-c", rank_says}));
  ASSERT_EQ(other.exit_code, 0) << other.err;
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_NE(other.out.find(fmt::format("[{}] parent={} ", rank, copy.file("muster"))), std::string::npos)
        << other.out;
}

// Nodes that cannot see the head's muster (each slurmd's mount namespace hides the build
// directory): the bundle of this build goes to them through sbcast, into this user's own
// directory on the node, never a shared one; each node checks it is this user's own file, no
// link, with the SHA-256 the head named, before anything of it runs; it starts from
// node-local storage, where the next session finds it, and the shipped file is removed. With
// --no-ship nothing is shipped and the missing muster is named.
TEST_F(SlurmTestCluster, NodesWithoutMusterGetTheBundleThroughSlurm) {
  const std::string build_dir = std::filesystem::path(muster_binary()).parent_path().string();
  delete cluster_;
  cluster_ = nullptr;
  ASSERT_NO_THROW(cluster_ = new SlurmCluster(4, build_dir));  // the first node still sees it
  TempDir node_tmp;  // the nodes' TMPDIR (srun passes it on): this test's cache, no other's
  std::filesystem::permissions(node_tmp.path(), std::filesystem::perms(01777));  // shared, as /tmp is
  const std::string own_dir = node_tmp.file(fmt::format("muster-{}", getuid()));
  // sbcast on the head's PATH: Slurm's own, each call logged; with MUSTER_TEST_TAMPER it then
  // does to the shipped file what another user could have done to one in a shared directory.
  TempDir shim;
  shim.write("sbcast", "#!/bin/sh\necho \"$*\" >> " + shim.file("calls") + "\n"
             "/usr/bin/sbcast \"$@\" || exit $?\nfor f; do :; done\n"
             "case \"$f\" in *.tar.gz) case \"$MUSTER_TEST_TAMPER\" in\n"
             "  content) printf 'not the bundle' > \"$f\";;\n"
             "  owner) chown nobody \"$f\";;\n"
             "  link) mv \"$f\" \"$f.real\" && ln -s \"$f.real\" \"$f\";;\n"
             "esac;; esac\n");
  std::filesystem::permissions(shim.file("sbcast"), std::filesystem::perms(0755));
  auto muster = [&](const std::vector<std::string>& args, const std::string& tamper = "") {
    std::vector<std::string> argv = {"env", "TMPDIR=" + node_tmp.path(), "MUSTER_TEST_TAMPER=" + tamper,
                                     "PATH=" + shim.path() + ":" + std::getenv("PATH"),
                                     // The bundle's loader confuses LeakSanitizer (see GpuCluster.*).
                                     "ASAN_OPTIONS=detect_leaks=0", "salloc", "-N2", "--quiet", "--",
                                     muster_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(cluster_->head_command(argv), {}, std::chrono::seconds(180));
  };
  auto shipped_files = [&] {
    std::vector<std::string> out;
    for (const auto& f : std::filesystem::directory_iterator(own_dir))
      if (f.path().filename().string().rfind("bundle-", 0) == 0) out.push_back(f.path().filename());
    return out;
  };
  auto seen = run_command(cluster_->head_command({"salloc", "-N2", "--quiet", "srun", "-l", "ls", muster_binary()}));
  ASSERT_NE(seen.exit_code, 0) << "the second node still sees " << muster_binary() << ": " << seen.out;

  // Any node but the first may be the one named: Slurm gives the next allocation other nodes
  // while the last one's are still completing.
  auto refused = muster({"run", "--no-ship", "--", "true"});
  EXPECT_NE(refused.exit_code, 0);
  bool named = false;
  for (int i = 1; i < 4; ++i)
    named |= refused.err.find(fmt::format("muster: {} is not on node {}, and --no-ship forbids", muster_binary(),
                                          cluster_->hosts().host(i))) != std::string::npos;
  EXPECT_TRUE(named) << refused.err;

  // Another user's directory where this user's would be: refused, nothing shipped into it.
  std::filesystem::create_directory(own_dir);
  ASSERT_EQ(chown(own_dir.c_str(), 65534, 65534), 0);
  auto theirs = muster({"run", "--", "true"});
  EXPECT_NE(theirs.exit_code, 0);
  EXPECT_NE(theirs.err.find("is not this user's own directory"), std::string::npos) << theirs.err;
  std::filesystem::remove_all(own_dir);

  // What sbcast left changed as another user could have changed it: nothing of it runs.
  for (const auto& [tamper, words] : std::vector<std::pair<std::string, std::string>>{
           {"content", "is not the bundle the head shipped"},
           {"owner", "is a link or not this user's own file"},
           {"link", "is a link or not this user's own file"}}) {
    auto tampered = muster({"run", "--", "hostname"}, tamper);
    EXPECT_NE(tampered.exit_code, 0) << tamper;
    EXPECT_NE(tampered.err.find(words), std::string::npos) << tamper << ": " << tampered.err;
    EXPECT_NE(tampered.err.find("refused, nothing of it run"), std::string::npos) << tampered.err;
    size_t unpacked = 0;
    for (const auto& entry : std::filesystem::directory_iterator(own_dir))
      unpacked += std::filesystem::exists(entry.path() / "complete");
    EXPECT_EQ(unpacked, 0u) << tamper << ": a tampered bundle was kept";
    for (const auto& entry : std::filesystem::directory_iterator(own_dir))
      if (entry.path().filename().string().rfind("bundle-", 0) == 0) std::filesystem::remove(entry.path());
  }
  std::filesystem::remove(shim.file("calls"));

  // The first node runs its own muster, the second the bundle: one job.
  auto ran = muster({"run", "--", "hostname"});
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_NE(ran.out.find(cluster_->hosts().host(0)), std::string::npos) << ran.out;
  EXPECT_NE(ran.out.find(cluster_->hosts().host(1)), std::string::npos) << ran.out;
  EXPECT_EQ(std::filesystem::status(own_dir).permissions(), std::filesystem::perms::owner_all);
  size_t bundles = 0;
  for (const auto& bundle : std::filesystem::directory_iterator(own_dir))
    bundles += std::filesystem::exists(bundle.path() / "complete");
  EXPECT_EQ(bundles, 1u) << "one bundle, unpacked once for the build";
  EXPECT_EQ(shipped_files(), std::vector<std::string>{}) << "the shipped files stay after unpacking";
  const std::string calls = shim.read("calls");
  EXPECT_NE(calls.find("--jobid="), std::string::npos) << "shipped to the whole allocation: " << calls;
  EXPECT_NE(calls.find(own_dir + "/bundle-"), std::string::npos) << calls;

  // The next sessions start from what the nodes hold: nothing is shipped again.
  std::filesystem::remove(shim.file("calls"));
  auto smoke = muster({"smoke", "--max-bytes", "4K"});
  EXPECT_EQ(smoke.exit_code, 0) << smoke.err << smoke.out;
  auto doctor = muster({"doctor"});
  EXPECT_EQ(doctor.exit_code, 0) << doctor.err << doctor.out;
  EXPECT_FALSE(std::filesystem::exists(shim.file("calls"))) << "shipped again: " << shim.read("calls");

  delete cluster_;
  cluster_ = new SlurmCluster(4);
}

// Slow (about 100 s): Slurm enforces one-minute time limits on slurmctld's 30-second sweep.
// Both ends at once, on two nodes each: a batch job's limit, where slurmstepd sends the head
// SIGTERM (and SIGKILL KillWait later), and an salloc's limit, where the agents' step is
// cancelled under a head that Slurm does not signal.
TEST_F(SlurmTestCluster, SlowTimeLimitsEndTheJobWith124InSlurmsWordsAndNothingIsLeft) {
  const std::string batch_mark = "MUSTER_TEST_MARK=batch-limit-" + std::to_string(getpid());
  const std::string step_mark = "MUSTER_TEST_MARK=step-limit-" + std::to_string(getpid());
  TempDir dir;
  std::filesystem::permissions(dir.path(), std::filesystem::perms(0755));
  // The shell's trap runs once muster has ended, so the script outlives the SIGTERM to say
  // how muster exited.
  dir.write("job.sh", fmt::format("#!/bin/sh\ntrap 'echo the shell got SIGTERM' TERM\n"
                                  "{} run -x {} -- sleep 300\necho \"muster exited $?\"\n",
                                  muster_binary(), batch_mark));
  RunningCommand batch(cluster_->head_command({"sbatch", "--wait", "-N2", "--time=1", "--nodelist=" +
                                             cluster_->hosts().host(0) + "," + cluster_->hosts().host(1),
                                             "-o", dir.file("job.out"), dir.file("job.sh")}));
  RunningCommand allocation(cluster_->salloc_muster(2, {"run", "-x", step_mark, "--", "sleep", "300"},
                                                  {"--time=1"}));
  const CommandResult by_salloc = allocation.wait(std::chrono::seconds(200));
  batch.wait(std::chrono::seconds(200));
  const std::string job_out = dir.read("job.out");

  EXPECT_NE(job_out.find("muster exited 124"), std::string::npos) << job_out;
  EXPECT_NE(job_out.find("Slurm time limit"), std::string::npos) << job_out;
  EXPECT_EQ(job_out.find("--timeout"), std::string::npos) << "not muster's own timeout: " << job_out;
  EXPECT_TRUE(nothing_left(batch_mark)) << "the batch job's ranks were left behind: " << job_out;

  EXPECT_EQ(by_salloc.exit_code, 124) << by_salloc.err;
  EXPECT_NE(by_salloc.err.find("Slurm time limit"), std::string::npos) << by_salloc.err;
  EXPECT_EQ(by_salloc.err.find("--timeout"), std::string::npos) << by_salloc.err;
  EXPECT_TRUE(nothing_left(step_mark)) << "the allocation's ranks were left behind: " << by_salloc.err;
}


// ---- muster health --drain as Slurm's health check, on the real slurmctld ----

// `muster health --drain` as slurmd would run it for `node`, reading the files of `tree` as
// that node's; returns its result.
CommandResult health_check(SlurmCluster& slurm, const std::string& node, const NodeTree& tree,
                           std::vector<std::string> more = {}, std::vector<std::string> env = {}) {
  std::vector<std::string> argv = {"env", "SLURMD_NODENAME=" + node, "MUSTER_HEALTH_FSROOT=" + tree.root()};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.insert(argv.end(), {muster_binary(), "health", "--drain"});
  argv.insert(argv.end(), more.begin(), more.end());
  return slurm.run(argv, 60);
}

// Gives `node` back to the other tests (resumed), however the test ends.
struct ResumedAtEnd {
  SlurmCluster* slurm;
  std::string node;
  ~ResumedAtEnd() { slurm->run({"scontrol", "update", "NodeName=" + node, "State=RESUME"}); }
};

// What `sinfo -R` says of `node`: its reason, or "" when it is not down or drained.
std::string drain_reason(SlurmCluster& slurm, const std::string& node) {
  CommandResult r = slurm.run({"sinfo", "-R", "-h", "-n", node, "-o", "%E"});
  std::string reason = r.out;
  while (!reason.empty() && (reason.back() == '\n' || reason.back() == ' ')) reason.pop_back();
  return reason;
}

TEST_F(SlurmTestCluster, HealthDrainsASickNodeWithItsReasonAndResumesItOnceWell) {
  const std::string node = cluster_->hosts().host(3);
  ResumedAtEnd resume{cluster_, node};
  NodeTree well, sick;
  well.healthy_gpu_node();
  sick.healthy_gpu_node();
  sick.ib_port("mlx5_0", "0000:3b:00.0", 2, "1: DOWN", "2: Polling", "100 Gb/sec (4X EDR)");
  // Both ports should be up: a port down with nothing to say so only warns (it may be uncabled).
  sick.write("expect.yaml", "expect:\n  ib_ports: 2\nnodes: [a]\n");

  auto r = health_check(*cluster_, node, sick, {"-f", sick.root() + "/expect.yaml"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(drain_reason(*cluster_, node).rfind("muster: mlx5_0 port 2 (0000:3b:00.0): state 1: DOWN", 0), 0u)
      << drain_reason(*cluster_, node) << "\n" << r.err;
  EXPECT_NE(r.err.find("muster: health: drained " + node), std::string::npos) << r.err;
  EXPECT_EQ(drain_reason(*cluster_, cluster_->hosts().host(2)), "");  // no other node is touched

  // Well on paper, but its GPUs' health cannot be read (no driver to ask): unknown is not
  // healthy, so the drain stays, saying why.
  r = health_check(*cluster_, node, well);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(drain_reason(*cluster_, node), "") << r.err;
  EXPECT_NE(r.err.find("muster: health: " + node + " stays drained"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("a check could not be made"), std::string::npos) << r.err;
  // Every check passing, its GPUs asked through NVML: resumed.
  r = health_check(*cluster_, node, well, {},
                   {std::string("LD_LIBRARY_PATH=") + fake_gpu_dir(),
                    std::string("MUSTER_FAKE_GPU_MACHINE=") + source_path("/tests/fakes/gpu/machines/two-gpus-healthy.txt")});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(drain_reason(*cluster_, node), "") << r.err;
  EXPECT_NE(r.err.find("muster: health: resumed " + node), std::string::npos) << r.err;
}

TEST_F(SlurmTestCluster, HealthNeverResumesOrRewordsADrainThatIsNotMusters) {
  const std::string node = cluster_->hosts().host(2);
  ResumedAtEnd resume{cluster_, node};
  auto admin = cluster_->run({"scontrol", "update", "NodeName=" + node, "State=DRAIN", "Reason=admin: new fans"});
  ASSERT_EQ(admin.exit_code, 0) << admin.err;
  NodeTree well, sick;
  well.healthy_gpu_node();
  sick.healthy_gpu_node();
  sick.write("sys/devices/pci0000:00/0000:17:00.0/0000:18:00.0/current_link_width", "8");
  for (const NodeTree* tree : {&well, &sick}) {
    auto r = health_check(*cluster_, node, *tree);
    EXPECT_EQ(drain_reason(*cluster_, node), "admin: new fans") << r.err;
    EXPECT_NE(r.err.find(node + " stays drained as someone else left it: admin: new fans"), std::string::npos)
        << r.err;
  }
}

TEST_F(SlurmTestCluster, AHealthCheckThatHangsIsCutAtItsDeadlineAndDrainsNamingTheCheck) {
  const std::string node = cluster_->hosts().host(1);
  ResumedAtEnd resume{cluster_, node};
  NodeTree tree;
  tree.healthy_gpu_node();
  TempDir dir;
  std::ifstream healthy(source_path("/tests/fakes/gpu/machines/two-gpus-healthy.txt"));
  dir.write("wedged.txt", std::string(std::istreambuf_iterator<char>(healthy), {}) + "hang 0000:2a:00.0\n");
  const auto started = std::chrono::steady_clock::now();
  auto r = health_check(*cluster_, node, tree, {"--timeout", "2"},
                        {std::string("LD_LIBRARY_PATH=") + fake_gpu_dir(),
                         "MUSTER_FAKE_GPU_MACHINE=" + dir.file("wedged.txt")});
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(drain_reason(*cluster_, node).find("stuck in the gpu check (NVML did not answer)"), std::string::npos)
      << drain_reason(*cluster_, node) << "\n" << r.err;
}

// Three of the allocation's four nodes run the job (-N 3, as srun -N) and the fourth is its
// spare. A node lost mid-step is left out, drained with why (--drain-bad), and its ranks move
// to the spare; the allocation (salloc --no-kill) and the agents' step outlive the node, and
// the job ends 0. Slow: its ranks sleep past slurmctld's SlurmdTimeout, when Slurm would end
// a step or an allocation without --no-kill, so it runs on a cluster of its own beside the rest.
TEST_F(SlurmTestCluster, SlowNodeLossMidStepLeavesTheNodeOutDrainedAndItsRanksMoveToTheSpare) {
  const std::string mark = "MUSTER_TEST_MARK=spare-" + std::to_string(getpid());
  const std::string lost = cluster_->hosts().host(2), spare = cluster_->hosts().host(3);
  RunningCommand head(cluster_->salloc_muster(
      4, {"run", "-N", "3", "--restarts", "1", "--drain-bad", "--heartbeat-timeout", "5", "--grace", "2", "-x", mark,
          "--", "sh", "-c", "echo count=$MUSTER_RESTART_COUNT; sleep 30"},
      {"--no-kill"}));
  ASSERT_TRUE(wait_until([&] { return !left_on(2, mark).empty(); }, std::chrono::seconds(30)))
      << "no rank started on " << lost;
  EXPECT_TRUE(left_on(3, mark).empty()) << "the spare ran ranks before a node was lost";
  std::this_thread::sleep_for(std::chrono::seconds(1));
  cluster_->lose_host(2);
  EXPECT_TRUE(wait_until([&] { return !left_on(3, mark).empty(); }, std::chrono::seconds(40)))
      << "no rank moved to the spare " << spare;
  auto r = head.wait(std::chrono::seconds(90));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("count=1"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find(lost + " left out; its ranks moved to " + spare), std::string::npos) << r.err;
  EXPECT_EQ(drain_reason(*cluster_, lost).rfind("muster: left out of job ", 0), 0u)
      << drain_reason(*cluster_, lost) << "\n" << r.err;
  EXPECT_NE(r.err.find("drained " + lost), std::string::npos) << r.err;
  EXPECT_EQ(drain_reason(*cluster_, spare), "") << "only the node left out is drained";
  EXPECT_TRUE(wait_until([&] {
    for (int i : {0, 1, 3})
      if (!left_on(i, mark).empty()) return false;
    return true;
  }, std::chrono::seconds(20))) << "ranks were left behind";
  // The lost node comes back, undrained, for the tests after this one.
  delete cluster_;
  cluster_ = new SlurmCluster(4);
}

}  // namespace
}  // namespace muster::testing
