// muster health and doctor's health stage end to end: this machine (no GPU, no HCA: no false
// FAIL), node snapshots made sick in the kernel's own formats read through --fsroot with the
// fake NVML answering through the real ABI, and a test cluster on which one host's agent reads
// a sick snapshot while the others read their own machine.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include <regex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/build_paths.h"
#include "tests/support/command_runner.h"
#include "tests/support/fake_gpus.h"
#include "tests/support/node_tree.h"
#include "tests/support/test_cluster.h"

namespace muster::testing {
namespace {

// The sick node of the issue: one GPU trained at x8, one IB port Down at a lower rate (and,
// through the fake NVML's two-gpus-sick machine, one row remap pending).
void make_sick(NodeTree& tree) {
  tree.healthy_gpu_node();
  // The device and the port above it show the one link, as the kernel does.
  tree.write("sys/devices/pci0000:00/0000:29:00.0/0000:2a:00.0/current_link_width", "8");
  tree.write("sys/devices/pci0000:00/0000:29:00.0/current_link_width", "8");
  tree.ib_port("mlx5_0", "0000:3b:00.0", 2, "1: DOWN", "2: Polling", "100 Gb/sec (4X EDR)");
}

std::vector<nlohmann::json> with_status(const nlohmann::json& report, const std::string& status,
                                        const std::string& node = "") {
  std::vector<nlohmann::json> out;
  for (const auto& c : report["checks"])
    if (c["stage"] == "health" && c["status"] == status && (node.empty() || c["node"] == node)) out.push_back(c);
  return out;
}
std::vector<nlohmann::json> failed(const nlohmann::json& report, const std::string& node = "") {
  return with_status(report, "fail", node);
}
// A port down with nothing to say it should be up (no expect.ib_ports, no record, no peer with
// it up) is named with its states, as a warning.
std::vector<nlohmann::json> warned(const nlohmann::json& report, const std::string& node = "") {
  return with_status(report, "warn", node);
}

const nlohmann::json* failed_check(const std::vector<nlohmann::json>& checks, const std::string& name,
                                   const std::string& device) {
  for (const auto& c : checks)
    if (c["name"] == name && c["finding"]["device"] == device) return &c;
  return nullptr;
}

// The JSON against share/doctor.schema.json and the JUnit parsed, as doctor's own are.
void expect_reports_follow_the_schema(const TempDir& dir) {
  if (run_command({"/usr/bin/python3", "-c", "import jsonschema"}).exit_code != 0) {
    if (in_ci()) ADD_FAILURE() << "python3-jsonschema is missing; .ci/run installs it";
    return;
  }
  auto r = run_command({"/usr/bin/python3", source_path("/tests/e2e/check_doctor_reports.py"),
                        source_path("/share/doctor.schema.json"), dir.file("report.json"),
                        dir.file("report.xml")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("ok ", 0), 0u) << r.out;
}

TEST(Health, ThisMachineWithoutGpusOrHcasIsHealthyAndSaysWhatItCouldNotCheck) {
  const auto started = std::chrono::steady_clock::now();
  auto r = run_muster({"health", "--json"});
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto report = nlohmann::json::parse(r.out);
  EXPECT_TRUE(failed(report).empty()) << r.out;
  std::set<std::string> checks;
  for (const auto& c : report["checks"]) {
    checks.insert(c["name"].get<std::string>());
    // Nothing found is said as such: a skip (absent) or a pass with what was read.
    if (c["finding"]["status"] == "absent") {
      EXPECT_EQ(c["status"], "skip") << c.dump();
    }
  }
  for (const char* name : {"pcie_link", "ib_port", "gpu", "xid", "software"}) EXPECT_TRUE(checks.count(name)) << name;
  std::cerr << "muster health on this machine: " << ms << " ms (with the process's start)\n";
}

TEST(Health, ASickNodeFailsNamingEachDeviceAndValue) {
  NodeTree tree;
  make_sick(tree);
  TempDir dir;
  // This node, its files under MUSTER_HEALTH_FSROOT (as in a container with the host's /sys
  // mounted elsewhere), its NVML the fake's.
  std::vector<std::string> env = fake_gpu_libraries("two-gpus-sick");
  env.push_back("MUSTER_HEALTH_FSROOT=" + tree.root());
  auto r = run_muster({"health", "--json", dir.file("report.json"), "--junit", dir.file("report.xml"),
                       "--prometheus", dir.file("health.prom")},
                      env);
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  std::ifstream in(dir.file("report.json"));
  auto report = nlohmann::json::parse(in);
  auto fails = failed(report);
  const auto* pcie = failed_check(fails, "pcie_link", "GPU1 0000:2a:00.0 NVIDIA H100 80GB HBM3");
  ASSERT_TRUE(pcie) << report.dump(2);
  EXPECT_NE((*pcie)["finding"]["observed"].get<std::string>().find("x8"), std::string::npos);
  EXPECT_EQ((*pcie)["finding"]["expected"], "x16 at 32.0 GT/s (Gen5)");
  const auto warnings = warned(report);
  const auto* ib = failed_check(warnings, "ib_port", "mlx5_0 port 2 (0000:3b:00.0)");
  ASSERT_TRUE(ib) << report.dump(2);
  EXPECT_NE((*ib)["finding"]["observed"].get<std::string>().find("1: DOWN"), std::string::npos);
  const auto* remap = failed_check(fails, "gpu_memory", "GPU1 0000:2a:00.0 NVIDIA H100 80GB HBM3");
  ASSERT_TRUE(remap) << report.dump(2);
  EXPECT_NE((*remap)["finding"]["observed"].get<std::string>().find("row remap pending"), std::string::npos);
  EXPECT_EQ(fails.size(), 2u) << report.dump(2);
  // NHC's convention: the last line says why, naming the first failure.
  EXPECT_NE(r.err.find("muster: health: FAIL "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("GPU1 0000:2a:00.0 NVIDIA H100 80GB HBM3: PCIe link x8"), std::string::npos) << r.err;
  // The same findings in JUnit and Prometheus.
  const std::string junit = dir.read("report.xml"), prom = dir.read("health.prom");
  EXPECT_NE(junit.find("row remap pending"), std::string::npos);
  EXPECT_NE(junit.find("mlx5_0 port 2"), std::string::npos);
  EXPECT_NE(prom.find("muster_doctor_device_status{"), std::string::npos);
  EXPECT_NE(prom.find("device=\"GPU1 0000:2a:00.0 NVIDIA H100 80GB HBM3\"} 2"), std::string::npos) << prom;
  EXPECT_NE(prom.find("muster_doctor_pcie_link_width{"), std::string::npos) << prom;
  expect_reports_follow_the_schema(dir);
}

TEST(Health, AHealthyNodePassesAndTheClusterFilesExpectationsApply) {
  NodeTree tree;
  tree.healthy_gpu_node();
  std::vector<std::string> env = fake_gpu_libraries("two-gpus-healthy");
  env.push_back("MUSTER_HEALTH_FSROOT=" + tree.root());
  auto healthy = run_muster({"health"}, env);
  EXPECT_EQ(healthy.exit_code, 0) << healthy.out << healthy.err;
  EXPECT_EQ(healthy.out.find("FAIL"), std::string::npos) << healthy.out;

  TempDir dir;
  dir.write("cluster.yaml", "expect:\n  gpus_per_node: 8\n  driver_version: 535.104.05\nnodes: [a]\n");
  auto r = run_muster({"health", "-f", dir.file("cluster.yaml"), "--json"}, env);
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  auto fails = failed(nlohmann::json::parse(r.out));
  ASSERT_EQ(fails.size(), 2u) << r.out;
  EXPECT_EQ(fails[0]["finding"]["expected_from"], "expect.gpus_per_node");
  EXPECT_EQ(fails[1]["finding"]["expected_from"], "expect.driver_version");
}

TEST(Health, ASnapshotIsReadWithoutThisMachinesNvml) {
  // Support's copy of a sick node's files, checked on another machine: its links and ports
  // are judged, and its GPUs' health is unknown rather than this machine's GPUs' health.
  NodeTree tree;
  make_sick(tree);
  tree.write("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar 5");
  auto r = run_muster({"health", "--fsroot", tree.root(), "--json"}, fake_gpu_libraries("two-gpus-healthy"));
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  auto report = nlohmann::json::parse(r.out);
  auto fails = failed(report);
  EXPECT_TRUE(failed_check(fails, "pcie_link", "GPU1 0000:2a:00.0")) << r.out;
  EXPECT_TRUE(failed_check(warned(report), "ib_port", "mlx5_0 port 2 (0000:3b:00.0)")) << r.out;
  EXPECT_EQ(fails.size(), 1u) << r.out;
  bool gpus_unknown = false;
  for (const auto& c : report["checks"])
    gpus_unknown |= c["name"] == "gpu" && c["finding"]["status"] == "unknown" &&
                    c["finding"]["observed"].get<std::string>().find("--fsroot") != std::string::npos;
  EXPECT_TRUE(gpus_unknown) << r.out;
  EXPECT_NE(r.out.find("NVIDIA driver 550.54.15"), std::string::npos) << r.out;  // from the snapshot's /proc
}

TEST(Health, ACheckThatHangsFailsAtTheDeadlineNamingIt) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.kernel_log("4,900,1000,-;NVRM: Xid (PCI:0000:2a:00): 79, pid=1234, GPU has fallen off the bus.");
  TempDir dir;
  // The healthy machine, with NVML never returning for its second GPU, as on a wedged one.
  std::ifstream healthy(fake_gpu_machine_file("two-gpus-healthy"));
  dir.write("wedged.txt", std::string(std::istreambuf_iterator<char>(healthy), {}) + "hang 0000:2a:00.0\n");
  const auto started = std::chrono::steady_clock::now();
  auto r = run_muster({"health", "--timeout", "1"},
                      {std::string("LD_LIBRARY_PATH=") + fake_gpu_dir(),
                       "MUSTER_FAKE_GPU_MACHINE=" + dir.file("wedged.txt"), "MUSTER_HEALTH_FSROOT=" + tree.root()});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_LT(seconds, 30) << "the deadline did not cut the hung check";
  EXPECT_NE(r.err.find("did not finish within 1 s: stuck in the gpu check (NVML did not answer)"),
            std::string::npos) << r.err;
  // What the node's files say still names the GPU that hung (the table wraps REASON at 80
  // columns: read it as one line).
  const std::string reasons = std::regex_replace(r.out, std::regex("\n +"), " ");
  EXPECT_NE(reasons.find("GPU1 0000:2a:00.0: Xid 79 in the kernel log since boot"), std::string::npos) << r.out;
}

// --record reads NVML too: on a wedged GPU it records nothing within the deadline, and says
// why, rather than hanging as nvidia-smi does.
TEST(Health, RecordingANodeWhoseNvmlHangsEndsAtTheDeadlineAndRecordsNothing) {
  NodeTree tree;
  tree.healthy_gpu_node();
  TempDir dir;
  std::ifstream healthy(fake_gpu_machine_file("two-gpus-healthy"));
  dir.write("wedged.txt", std::string(std::istreambuf_iterator<char>(healthy), {}) + "hang 0000:2a:00.0\n");
  const std::vector<std::string> env = {std::string("LD_LIBRARY_PATH=") + fake_gpu_dir(),
                                        "MUSTER_FAKE_GPU_MACHINE=" + dir.file("wedged.txt"),
                                        "MUSTER_HEALTH_FSROOT=" + tree.root(), "MUSTER_STATE_DIR=" + dir.file("state")};
  RunningCommand record({muster_binary(), "health", "--timeout", "1", "--record"}, env);
  const CommandResult r = record.wait(std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("--record: the checks did not finish within 1 s"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("state/node.record"))) << "a hung node was recorded";
}

TEST(Health, AnXidFailsUntilAcceptedAfterTheRepairThenOnlyANewOneFails) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.write("proc/sys/kernel/random/boot_id", "0f1e2d3c-boot");
  const std::string xid = "4,900,1000,-;NVRM: Xid (PCI:0000:2a:00): 79, pid=1, GPU has fallen off the bus.";
  tree.kernel_log(xid);
  TempDir dir;
  const std::vector<std::string> state = {"MUSTER_STATE_DIR=" + dir.file("state")};
  for (int run = 0; run < 2; ++run) {
    auto r = run_muster({"health", "--fsroot", tree.root()}, state);
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("Xid 79 in the kernel log since boot"), std::string::npos) << r.err;
  }
  auto r = run_muster({"health", "--fsroot", tree.root(), "--accept-counters"}, state);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("accepted"), std::string::npos) << r.err;
  EXPECT_EQ(run_muster({"health", "--fsroot", tree.root()}, state).exit_code, 0);
  tree.kernel_log(xid + "\n" + xid);
  r = run_muster({"health", "--fsroot", tree.root()}, state);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("1 new Xid 79 (2 since boot)"), std::string::npos) << r.err;
}

TEST(Health, ARecordedNodeFailsWhenAPortActiveAtRecordTimeIsDown) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.ib_port("mlx5_0", "0000:3b:00.0", 2, "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)");
  TempDir dir;
  const std::vector<std::string> state = {"MUSTER_STATE_DIR=" + dir.file("state")};
  auto r = run_muster({"health", "--fsroot", tree.root(), "--record"}, state);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("recorded 2 GPUs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2 active IB/RoCE ports (mlx5_0 port 1, mlx5_0 port 2) at 400 Gb/s"), std::string::npos)
      << r.err;
  tree.ib_port("mlx5_0", "0000:3b:00.0", 2, "1: DOWN", "2: Polling", "400 Gb/sec (4X NDR)");
  // The cluster file expects one port: without the record the second one down only warns.
  dir.write("cluster.yaml", "expect:\n  ib_ports: 1\nnodes: [a]\n");
  r = run_muster({"health", "--fsroot", tree.root(), "-f", dir.file("cluster.yaml")},
                 {"MUSTER_STATE_DIR=" + dir.file("no-record")});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_muster({"health", "--fsroot", tree.root(), "-f", dir.file("cluster.yaml"), "--json"}, state);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  auto report = nlohmann::json::parse(r.out);
  const auto checks = failed(report);
  const nlohmann::json* port = failed_check(checks, "ib_port", "mlx5_0 port 2 (0000:3b:00.0)");
  ASSERT_NE(port, nullptr) << r.out;
  EXPECT_NE((*port)["finding"]["observed"].get<std::string>().find("1: DOWN"), std::string::npos);
}

TEST(Health, BadInputIsAUsageErrorAndStartsNothing) {
  auto r = run_muster({"health", "--fsroot", "/nonexistent/snapshot"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--fsroot /nonexistent/snapshot: not a directory"), std::string::npos) << r.err;
  TempDir dir;
  dir.write("cluster.yaml", "expect:\n  pcie_gen: 9\nnodes: [a]\n");
  auto bad = run_muster({"health", "-f", dir.file("cluster.yaml")});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("expect.pcie_gen must be between 1 and 6"), std::string::npos) << bad.err;
  EXPECT_EQ(run_muster({"health", "--timeout", "0"}).exit_code, 2);
}

class HealthOnTheTestCluster : public ::testing::Test {
 protected:
  void SetUp() override { MUSTER_REQUIRE_TEST_CLUSTER(); }
};

TEST_F(HealthOnTheTestCluster, DoctorFailsTheSickHostByNameAndPassesTheHealthyOnes) {
  NodeTree sick;
  make_sick(sick);
  TestCluster cluster(3);
  HostSetup sick_host;
  sick_host.environment = fake_gpu_libraries("two-gpus-sick");
  sick_host.environment.push_back("MUSTER_HEALTH_FSROOT=" + sick.root());
  // Under CI's AddressSanitizer build the bundle's loader with LD_LIBRARY_PATH makes
  // LeakSanitizer report the loader's own allocations (see gpu_paths_test.cpp).
  sick_host.environment.push_back("ASAN_OPTIONS=detect_leaks=0");
  // The first host, where MASTER_ADDR would go: a node that failed its health is passed over.
  cluster.set_up_host(0, sick_host);
  const std::string file = cluster.write_cluster_file();
  TempDir dir;
  auto r = cluster.muster({"doctor", "-f", file, "--json", dir.file("report.json"), "--junit",
                           dir.file("report.xml"), "--prometheus", dir.file("muster.prom")});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  std::ifstream in(dir.file("report.json"));
  auto report = nlohmann::json::parse(in);
  const std::string sick_name = cluster.host(0);
  bool placed = false;
  for (const auto& c : report["checks"])
    if (c["name"] == "rendezvous")
      placed = c["reason"].get<std::string>().find(" on " + cluster.host(1) + ", not " + sick_name +
                                                    ", which failed a check") != std::string::npos;
  EXPECT_TRUE(placed) << report.dump(2);
  auto fails = failed(report, sick_name);
  EXPECT_TRUE(failed_check(fails, "pcie_link", "GPU1 0000:2a:00.0 NVIDIA H100 80GB HBM3")) << report.dump(2);
  EXPECT_TRUE(failed_check(warned(report, sick_name), "ib_port", "mlx5_0 port 2 (0000:3b:00.0)")) << report.dump(2);
  EXPECT_TRUE(failed_check(fails, "gpu_memory", "GPU1 0000:2a:00.0 NVIDIA H100 80GB HBM3")) << report.dump(2);
  for (int healthy : {1, 2}) EXPECT_TRUE(failed(report, cluster.host(healthy)).empty()) << report.dump(2);
  // Every other stage ran on all three and passed: the sick host is named, not the cluster's reach.
  for (const auto& stage : report["stages"])
    if (stage["name"] != "health") {
      EXPECT_NE(stage["status"], "fail") << stage.dump();
    }
  const std::string junit = dir.read("report.xml"), prom = dir.read("muster.prom");
  EXPECT_NE(junit.find("gpu_memory [" + sick_name + "] GPU1 0000:2a:00.0 NVIDIA H100 80GB HBM3"), std::string::npos)
      << junit;
  EXPECT_NE(prom.find("node=\"" + sick_name + "\",device=\"mlx5_0 port 2 (0000:3b:00.0)\"} 1"), std::string::npos)
      << prom;
  expect_reports_follow_the_schema(dir);
}

}  // namespace
}  // namespace muster::testing
