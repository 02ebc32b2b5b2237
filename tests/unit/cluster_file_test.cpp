#include "launcher/cluster/cluster_file.h"

#include <gtest/gtest.h>

#include "launcher/error.h"
#include "launcher/remote/health_report.h"
#include "tests/support/build_paths.h"

using muster::testing::source_path;

namespace muster {
namespace {

std::vector<std::string> problems_of(const std::string& yaml) {
  try {
    parse_cluster_yaml(yaml, "cluster.yaml");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    return e.messages();
  }
  ADD_FAILURE() << "accepted:\n" << yaml;
  return {};
}

TEST(ClusterFile, ReadsTheAnnotatedExample) {
  ClusterSpec spec = load_cluster_file(source_path("/share/cluster.example.yaml"));
  EXPECT_EQ(spec.name, "training-a");
  ASSERT_EQ(spec.nodes.size(), 7u);
  EXPECT_EQ(spec.nodes[0].host, "gpu01");
  EXPECT_EQ(spec.nodes[0].address, "10.1.0.11");
  EXPECT_EQ(spec.nodes[3].address, "10.1.0.14");
  EXPECT_TRUE(spec.nodes[0].slots.is_auto());
  EXPECT_EQ(spec.nodes[4].slots.fixed, 4);
  EXPECT_EQ(spec.nodes[4].ssh.port, 2222);
  EXPECT_EQ(spec.nodes[4].ssh.user, "mlops");  // inherited from the file's ssh:
  EXPECT_EQ(spec.nodes[0].ssh.port, 22);
  EXPECT_EQ(spec.nodes[6].host, "gpu07");
  EXPECT_EQ(spec.nodes[6].address, "gpu07");
  EXPECT_EQ(spec.ssh.host_keys, HostKeyPolicy::Strict);
  EXPECT_EQ(spec.ssh.connect_timeout_s, 10.0);
  EXPECT_EQ(spec.launch.env.at("PYTHONUNBUFFERED"), "1");
  EXPECT_EQ(spec.launch.chdir, "/shared/job");
  EXPECT_EQ(spec.checks.gpus_per_node, 8);
  EXPECT_EQ(spec.checks.gpu_model, "H100");
  EXPECT_DOUBLE_EQ(*spec.checks.max_rtt_ms, 0.5);
  EXPECT_DOUBLE_EQ(*spec.checks.min_busbw_gbps, 100);
  EXPECT_DOUBLE_EQ(*spec.checks.min_bandwidth_ratio, 0.5);
}

TEST(ClusterFile, TheStressBarsReachTheHealthExpectationsButAPlainHealthRequestRunsNoStress) {
  ClusterSpec plain = parse_cluster_yaml("nodes: [a]\n", "c.yaml");
  EXPECT_FALSE(plain.expect.stress.run);
  EXPECT_DOUBLE_EQ(plain.expect.stress.peer_ratio, 0.7);
  EXPECT_DOUBLE_EQ(plain.expect.stress.hardware_ratio, 0.5);
  ClusterSpec spec = parse_cluster_yaml(
      "checks:\n  stress: true\n  stress_peer_ratio: 0.8\n  stress_hardware_ratio: 0.6\nnodes: [a]\n", "c.yaml");
  EXPECT_EQ(spec.checks.stress, true);
  EXPECT_DOUBLE_EQ(spec.expect.stress.peer_ratio, 0.8);
  EXPECT_DOUBLE_EQ(spec.expect.stress.hardware_ratio, 0.6);
  // Whether they run is doctor's and health's choice: the health request every other caller
  // sends (the restart path's quick check among them) holds no node's GPUs.
  EXPECT_FALSE(spec.expect.stress.run);
  EXPECT_EQ(health_request_json(spec.expect).find("stress"), std::string::npos) << health_request_json(spec.expect);
  EXPECT_FALSE(expectations_from_request(health_request_json(spec.expect)).stress.run);
}

TEST(ClusterFile, LaunchSlotsAreTheDefaultWhereverLaunchIsWritten) {
  ClusterSpec spec = parse_cluster_yaml("nodes: [a, {host: b, slots: 2}]\nlaunch: {slots: 3}\n",
                                        "c.yaml");
  EXPECT_EQ(spec.nodes[0].slots.fixed, 3);
  EXPECT_EQ(spec.nodes[1].slots.fixed, 2);
}

struct BadFile {
  const char* yaml;
  const char* message;  // the whole expected message, location included
};

TEST(ClusterFile, EachProblemIsNamedWithLineAndColumn) {
  const BadFile cases[] = {
      {"nodes:\n  - host: a\n    slot: 4\n",
       "cluster.yaml:3:5: unknown key 'slot' in a node entry, did you mean 'slots'?"},
      {"nodes:\n  - host: a\n    slots: -1\n",
       "cluster.yaml:3:12: slots must be 'auto' or a whole number of at least 1, not '-1'"},
      {"nodes:\n  - host: a\n    slots: four\n",
       "cluster.yaml:3:12: slots must be 'auto' or a whole number of at least 1, not 'four'"},
      {"nodes:\n  - host: gpu[01-02]\n  - host: gpu02\n",
       "cluster.yaml:3:11: host 'gpu02' is listed twice (first at cluster.yaml:2:11); a machine "
       "listed twice would run duplicate ranks; give it one entry with more slots instead"},
      {"checks:\n  min_bandwidth_ratio: 2\nnodes: [a]\n",
       "cluster.yaml:2:24: checks.min_bandwidth_ratio must be above 0 and at most 1 (a fraction of the "
       "cluster median), not 2"},
      {"checks:\n  stress: yes please\nnodes: [a]\n",
       "cluster.yaml:2:11: checks.stress must be true or false, not 'yes please'"},
      {"checks:\n  stress_peer_ratio: 1.5\nnodes: [a]\n",
       "cluster.yaml:2:22: checks.stress_peer_ratio must be above 0 and at most 1 (a fraction of the GPU's peers' "
       "median), not 1.5"},
      {"ssh:\n  port: abc\nnodes: [a]\n",
       "cluster.yaml:2:9: ssh.port must be a whole number, not 'abc'"},
      {"ssh:\n  port: 70000\nnodes: [a]\n",
       "cluster.yaml:2:9: ssh.port must be between 1 and 65535, not 70000"},
      {"ssh:\n  host_keys: off\nnodes: [a]\n",
       "cluster.yaml:2:14: ssh.host_keys must be 'strict' or 'accept-new', not 'off'; host key "
       "checking cannot be turned off"},
      {"nodes: a\n", "cluster.yaml:1:8: 'nodes' must be a non-empty list of entries such as "
                     "'- host: gpu[01-04]'"},
      {"name: x\n", "cluster.yaml:1:1: missing 'nodes:', the list of machines; add e.g. "
                    "'nodes: [{host: \"gpu[01-04]\"}]'"},
      {"nodes:\n  - host: gpu[3-1]\n",
       "cluster.yaml:2:11: host list 'gpu[3-1]': range '3-1' runs backwards; write '1-3'"},
      {"nodes:\n  - host: n[1-2]\n    address: 10.0.0.[1-3]\n",
       "cluster.yaml:3:14: 'address' names 3 addresses for 2 hosts; give one address per host, "
       "e.g. 'address: 10.0.0.[1-2]'"},
      {"launch:\n  env: [a]\nnodes: [a]\n",
       "cluster.yaml:2:8: 'launch.env' must be a mapping of keys to values"},
      {"launch:\n  env:\n    1BAD: x\nnodes: [a]\n",
       "cluster.yaml:3:5: '1BAD' is not a valid environment variable name (letters, digits and "
       "'_', not starting with a digit)"},
      {"checks:\n  max_rtt_ms: fast\nnodes: [a]\n",
       "cluster.yaml:2:15: checks.max_rtt_ms must be a number of zero or more, not 'fast'"},
      {"nodes:\n  - slots: 2\n", "cluster.yaml:2:5: node entry has no 'host'; add e.g. 'host: gpu01'"},
      {"nodes: [a]\nnodes: [b]\n", "cluster.yaml:2:1: key 'nodes' appears twice in cluster file"},
      {"nodes: [a\n", "cluster.yaml:2:1: not valid YAML: end of sequence flow not found"},
      {"- a\n", "cluster.yaml:1:1: a cluster file is a mapping with keys such as 'name', 'ssh', "
                "'launch', 'checks', 'expect' and 'nodes'"},
      {"", "cluster.yaml:1:1: the file is empty; it needs at least a 'nodes:' list"},
      // Numbers beyond what any input can mean are named, never an overflow or a crash.
      {"checks:\n  max_rtt_ms: 1e999\nnodes: [a]\n",
       "cluster.yaml:2:15: checks.max_rtt_ms must be a number below 1e12, not '1e999'"},
      {"nodes:\n  - host: a\n    slots: 999999999\n",
       "cluster.yaml:3:12: slots must be at most 1024 (muster's limit per node), not '999999999'"},
      {"ssh:\n  port: 999999999999\nnodes: [a]\n",
       "cluster.yaml:2:9: ssh.port must be between 1 and 65535, not 999999999999"},
  };
  for (const auto& c : cases) {
    auto problems = problems_of(c.yaml);
    ASSERT_EQ(problems.size(), 1u) << c.yaml << "\n" << (problems.empty() ? "" : problems[0]);
    EXPECT_EQ(problems[0], c.message) << c.yaml;
  }
}

TEST(ClusterFile, LauncherIsSshUnlessTheFileSaysSlurm) {
  EXPECT_EQ(parse_cluster_yaml("nodes: [{host: a}]\n", "c.yaml").launcher, Launcher::Ssh);
  EXPECT_EQ(parse_cluster_yaml("launcher: slurm\nnodes: [{host: a}]\n", "c.yaml").launcher, Launcher::Slurm);
  EXPECT_EQ(problems_of("launcher: pbs\nnodes: [{host: a}]\n"),
            std::vector<std::string>{"cluster.yaml:1:11: launcher: 'pbs' is not a launcher; use 'ssh' or 'slurm'"});
}

TEST(ClusterFile, ReportsEveryProblemInOnePass) {
  auto problems = problems_of(
      "nmae: x\n"
      "ssh: {port: abc}\n"
      "nodes:\n"
      "  - host: a\n"
      "    slots: 0\n"
      "  - host: a\n");
  ASSERT_EQ(problems.size(), 4u);
  EXPECT_EQ(problems[0], "cluster.yaml:1:1: unknown key 'nmae' in cluster file, did you mean 'name'?");
  EXPECT_NE(problems[1].find("cluster.yaml:2:13: ssh.port"), std::string::npos);
  EXPECT_NE(problems[2].find("cluster.yaml:5:12: slots"), std::string::npos);
  EXPECT_NE(problems[3].find("cluster.yaml:6:11: host 'a' is listed twice"), std::string::npos);
}

// Cluster files written before launch.chdir had its name keep working; both at once is a
// contradiction waiting to happen.
TEST(ClusterFile, LaunchWorkdirIsChdirsOlderName) {
  EXPECT_EQ(parse_cluster_yaml("nodes: [a]\nlaunch: {workdir: /old}\n", "cluster.yaml").launch.chdir, "/old");
  EXPECT_EQ(parse_cluster_yaml("nodes: [a]\nlaunch: {chdir: /new}\n", "cluster.yaml").launch.chdir, "/new");
  auto problems = problems_of("nodes: [a]\nlaunch: {chdir: /new, workdir: /old}\n");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "cluster.yaml:2:32: launch.workdir is launch.chdir's older name, and both are "
                         "given; keep launch.chdir");
}

TEST(ClusterFile, UnknownKeyFarFromAnyGetsTheListOfKnownKeys) {
  auto problems = problems_of("nodes: [a]\nlaunch: {zzzzzz: 1}\n");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "cluster.yaml:2:10: unknown key 'zzzzzz' in 'launch'; known keys are "
                         "slots, env, chdir, mpi, workdir, restarts");
}

TEST(ClusterFile, LaunchMpiTakesTheWordsOfMpiAndNamesThemWhenWrong) {
  EXPECT_EQ(parse_cluster_yaml("nodes: [a]\nlaunch: {mpi: pmi1}\n", "cluster.yaml").launch.mpi, "pmi1");
  auto problems = problems_of("nodes: [a]\nlaunch: {mpi: openmpi}\n");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "cluster.yaml:2:15: launch.mpi is 'openmpi'; write auto, pmix, pmi1 or none (as --mpi)");
}

TEST(ClusterFile, MissingFileIsOneClearLine) {
  try {
    load_cluster_file("/nonexistent/cluster.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "/nonexistent/cluster.yaml: cannot read the cluster file: No such file or directory");
  }
}

}  // namespace
}  // namespace muster

namespace muster {
namespace {

TEST(ClusterFile, ExpectGivesTheHealthChecksTheirExpectations) {
  ClusterSpec spec = parse_cluster_yaml(
      "expect:\n  gpus_per_node: 8\n  gpu_model: H100\n  pcie_gen: 5\n  pcie_width: 16\n"
      "  ib_rate_gbps: 400\n  ib_ports: 8\n  driver_version: 550.54.15\nnodes: [a]\n",
      "cluster.yaml");
  EXPECT_EQ(spec.expect.gpus_per_node, 8);
  EXPECT_EQ(spec.expect.gpu_model, "H100");
  EXPECT_EQ(spec.expect.pcie_gen, 5);
  EXPECT_EQ(spec.expect.pcie_width, 16);
  EXPECT_EQ(spec.expect.ib_rate_gbps, 400.0);
  EXPECT_EQ(spec.expect.ib_ports, 8);
  EXPECT_EQ(spec.expect.driver_version, "550.54.15");
  EXPECT_FALSE(parse_cluster_yaml("nodes: [a]\n", "cluster.yaml").expect.pcie_gen);
}

TEST(ClusterFile, ExpectsProblemsAreNamedWithLineColumnAndASuggestion) {
  auto problems = problems_of("expect:\n  pcie_with: 16\n  pcie_gen: 7\n  ib_rate_gbps: fast\nnodes: [a]\n");
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_EQ(problems[0], "cluster.yaml:2:3: unknown key 'pcie_with' in 'expect', did you mean 'pcie_width'?");
  EXPECT_EQ(problems[1], "cluster.yaml:3:13: expect.pcie_gen must be between 1 and 6, not 7");
  EXPECT_NE(problems[2].find("cluster.yaml:4:17: expect.ib_rate_gbps must be a number"), std::string::npos);
}

}  // namespace
}  // namespace muster
