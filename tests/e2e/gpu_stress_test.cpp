// muster health --stress end to end, on the fake CUDA runtime, cuBLAS and NVML (tests/fakes/gpu)
// through the real ABI: each machine file gives the GPUs' rates, the events report the time
// those rates imply, and the binary measures and judges them as on a GPU node. A healthy
// two- and eight-GPU node pass; one GPU with slow host copies, slow memory or a slow GEMM,
// and one slow pair, each fail naming exactly that GPU or pair; the JSON carries every
// figure; on this machine's own CUDA runtime (no GPU) the tests are unknown, not passed.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/command_runner.h"
#include "tests/support/fake_gpus.h"
#include "tests/support/node_tree.h"
#include "tests/support/test_cluster.h"

namespace muster::testing {
namespace {

const std::vector<std::string> kStressChecks = {"gpu_host_copy", "gpu_memory_bandwidth", "gpu_gemm", "gpu_peer_copy",
                                                "gpu_stress"};

bool is_stress(const nlohmann::json& c) {
  return std::find(kStressChecks.begin(), kStressChecks.end(), c["name"].get<std::string>()) != kStressChecks.end();
}

std::vector<nlohmann::json> stress_checks(const nlohmann::json& report, const std::string& status = "") {
  std::vector<nlohmann::json> out;
  for (const auto& c : report["checks"])
    if (is_stress(c) && (status.empty() || c["finding"]["status"] == status)) out.push_back(c);
  return out;
}

size_t count_of(const std::vector<nlohmann::json>& checks, const std::string& name) {
  return size_t(std::count_if(checks.begin(), checks.end(), [&](const auto& c) { return c["name"] == name; }));
}

class GpuStress : public ::testing::Test {
 protected:
  void SetUp() override { MUSTER_REQUIRE_FAKE_NCCL(); }  // the fake CUDA runtime and cuBLAS are built with it
};

TEST_F(GpuStress, HealthyTwoAndEightGpuNodesPassAndTheJsonCarriesEveryFigure) {
  // Two GPUs with their PCIe links readable (Gen5 x16): the host copies are judged against
  // their links too.
  NodeTree tree;
  tree.healthy_gpu_node();
  std::vector<std::string> env = fake_gpu_libraries("two-gpus-healthy");
  env.push_back("MUSTER_HEALTH_FSROOT=" + tree.root());
  auto plain = run_muster({"health", "--json"}, env);
  ASSERT_EQ(plain.exit_code, 0) << plain.out << plain.err;
  EXPECT_TRUE(stress_checks(nlohmann::json::parse(plain.out)).empty()) << "measured without --stress";

  auto two = run_muster({"health", "--stress", "--json"}, env);
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  auto report = nlohmann::json::parse(two.out);
  EXPECT_EQ(stress_checks(report).size(), stress_checks(report, "pass").size()) << two.out;
  const auto checks = stress_checks(report);
  EXPECT_EQ(count_of(checks, "gpu_host_copy"), 2u);
  EXPECT_EQ(count_of(checks, "gpu_peer_copy"), 1u);
  for (const auto& c : checks) {
    if (c["name"] != "gpu_host_copy") continue;
    {
      EXPECT_NE(c["finding"]["device"].get<std::string>().find("GPU-8b0c0000-0000-4000-8000-00000000000"),
                std::string::npos) << c.dump();
      // The fake's 50 GB/s each way, as its events timed it.
      EXPECT_NEAR(c["values"]["h2d_gigabytes_per_second"].get<double>(), 50, 1e-3) << c.dump();
      EXPECT_NEAR(c["values"]["d2h_all_gigabytes_per_second"].get<double>(), 50, 1e-3) << c.dump();
    }
  }

  auto eight = run_muster({"health", "--stress", "--json"}, fake_gpu_libraries("eight-gpus-nvswitch"));
  auto report8 = nlohmann::json::parse(eight.out);
  const auto checks8 = stress_checks(report8);
  EXPECT_EQ(checks8.size(), stress_checks(report8, "pass").size()) << eight.out;
  EXPECT_EQ(count_of(checks8, "gpu_host_copy"), 8u);
  EXPECT_EQ(count_of(checks8, "gpu_memory_bandwidth"), 8u);
  EXPECT_EQ(count_of(checks8, "gpu_gemm"), 8u);
  EXPECT_EQ(count_of(checks8, "gpu_peer_copy"), 28u);
  for (const auto& c : checks8) {
    const auto& v = c["values"];
    if (c["name"] == "gpu_host_copy") {
      for (const char* key : {"h2d_gigabytes_per_second", "d2h_gigabytes_per_second", "h2d_all_gigabytes_per_second",
                              "d2h_all_gigabytes_per_second"})
        EXPECT_TRUE(v.contains(key)) << key << " " << c.dump();
    }
    if (c["name"] == "gpu_memory_bandwidth") {
      EXPECT_NEAR(v["hbm_gigabytes_per_second"].get<double>(), 2000, 1e-2);
    }
    if (c["name"] == "gpu_gemm") {
      EXPECT_NEAR(v["gemm_teraflops"].get<double>(), 600, 1e-3);
      EXPECT_EQ(v["sm_clock_megahertz"].get<double>(), 1980);
    }
    if (c["name"] == "gpu_peer_copy") {
      EXPECT_NEAR(v["forward_gigabytes_per_second"].get<double>(), 360, 1e-3);  // 18 NVLinks at 20 GB/s
      EXPECT_NEAR(v["backward_gigabytes_per_second"].get<double>(), 360, 1e-3);
      EXPECT_EQ(v["nvlinks"].get<double>(), 18);
    }
  }
}

TEST_F(GpuStress, EachSlowGpuOrPairFailsNamingExactlyThatOne) {
  struct Case {
    const char* machine;
    const char* check;
    const char* device;    // how the finding's device begins
    const char* observed;  // a part of what it saw
    const char* remedy;    // a part of the likely cause
  };
  const Case cases[] = {
      {"eight-gpus-slow-host-copy", "gpu_host_copy",
       "GPU3 0000:5d:00.0 NVIDIA H100 80GB HBM3 GPU-8b0c0000-0000-4000-8000-000000000003", "H2D 15.0 GB/s",
       "no throttle reason nor degraded link"},
      {"eight-gpus-slow-hbm", "gpu_memory_bandwidth",
       "GPU5 0000:ab:00.0 NVIDIA H100 80GB HBM3 GPU-8b0c0000-0000-4000-8000-000000000005",
       "copy within the GPU 1000.0 GB/s", "its memory is slow"},
      {"eight-gpus-slow-pair", "gpu_peer_copy",
       "GPU1 0000:2a:00.0 NVIDIA H100 80GB HBM3 GPU-8b0c0000-0000-4000-8000-000000000001 <-> GPU6 0000:ba:00.0",
       "GPU1 to GPU6 90.0 GB/s; GPU6 to GPU1 90.0 GB/s", "NVLink fabric"},
      {"eight-gpus-slow-gemm", "gpu_gemm",
       "GPU7 0000:db:00.0 NVIDIA H100 80GB HBM3 GPU-8b0c0000-0000-4000-8000-000000000007",
       "BF16 GEMM 250.0 TFLOPS at an SM clock of 1100 MHz", "clocks held down by power cap"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.machine);
    auto r = run_muster({"health", "--stress", "--json"}, fake_gpu_libraries(c.machine));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    auto report = nlohmann::json::parse(r.out);
    const auto failed = stress_checks(report, "fail");
    ASSERT_EQ(failed.size(), 1u) << r.out;
    EXPECT_EQ(failed[0]["name"], c.check);
    EXPECT_EQ(failed[0]["finding"]["device"].get<std::string>().rfind(c.device, 0), 0u) << failed[0].dump();
    EXPECT_NE(failed[0]["finding"]["observed"].get<std::string>().find(c.observed), std::string::npos)
        << failed[0].dump();
    EXPECT_NE(failed[0]["finding"]["expected_from"].get<std::string>().find("median of its"), std::string::npos)
        << failed[0].dump();
    EXPECT_NE(failed[0]["finding"]["remedy"].get<std::string>().find(c.remedy), std::string::npos) << failed[0].dump();
    // Nothing else of the stress tests is anything but a pass.
    EXPECT_EQ(stress_checks(report).size(), stress_checks(report, "pass").size() + 1) << r.out;
    EXPECT_NE(r.err.find(std::string("muster: health: FAIL ")), std::string::npos) << r.err;
  }
}

TEST_F(GpuStress, DoctorsHealthStageRunsThemWithStressOrTheClusterFilesChecksStress) {
  // doctor on this machine alone: its health stage is this machine's, as an agent's would be.
  auto r = run_muster({"doctor", "--only", "health", "--stress", "--json"}, fake_gpu_libraries("eight-gpus-slow-hbm"));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const auto failed = stress_checks(nlohmann::json::parse(r.out), "fail");
  ASSERT_EQ(failed.size(), 1u) << r.out;
  EXPECT_EQ(failed[0]["name"], "gpu_memory_bandwidth");
  EXPECT_EQ(failed[0]["finding"]["device"].get<std::string>().rfind("GPU5 0000:ab:00.0", 0), 0u) << failed[0].dump();
  // Without the flag, only the cluster file asks for them, and with its own bar.
  TempDir dir;
  dir.write("cluster.yaml", "checks:\n  stress: true\n  stress_peer_ratio: 0.4\nnodes: [a]\n");
  auto lenient = run_muster({"health", "-f", dir.file("cluster.yaml"), "--json"}, fake_gpu_libraries("eight-gpus-slow-hbm"));
  EXPECT_EQ(lenient.exit_code, 0) << lenient.out << lenient.err;  // 1000 GB/s is above 0.4x 2000
  const auto report = nlohmann::json::parse(lenient.out);
  EXPECT_EQ(count_of(stress_checks(report), "gpu_memory_bandwidth"), 8u) << lenient.out;
  EXPECT_TRUE(stress_checks(report, "fail").empty()) << lenient.out;
}

class GpuStressOnTheTestCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    MUSTER_REQUIRE_FAKE_NCCL();
    MUSTER_REQUIRE_TEST_CLUSTER();
  }
};

TEST_F(GpuStressOnTheTestCluster, DoctorNamesTheHostAndGpuWhoseGemmIsSlowThroughItsAgent) {
  // Three hosts, as the cluster compares a figure across at least three nodes: host 1 has one
  // slow GPU, which fails on the node; host 2's GPUs are slow alike, which only the cluster
  // shows.
  TestCluster cluster(3);
  const char* machines[] = {"eight-gpus-nvswitch", "eight-gpus-slow-gemm", "eight-gpus-slow-alike"};
  for (int h : {0, 1, 2}) {
    HostSetup host;
    host.environment = fake_gpu_libraries(machines[h]);
    host.environment.push_back("ASAN_OPTIONS=detect_leaks=0");  // as in health_test.cpp
    cluster.set_up_host(h, host);
  }
  const std::string file = cluster.write_cluster_file();
  auto r = cluster.muster({"doctor", "-f", file, "--only", "cluster,ssh,health", "--stress", "--json"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const auto report = nlohmann::json::parse(r.out);
  const auto failed = stress_checks(report, "fail");
  ASSERT_EQ(failed.size(), 9u) << r.out;
  size_t on_host_2 = 0;
  for (const auto& f : failed) {
    EXPECT_EQ(f["name"], "gpu_gemm") << f.dump();
    if (f["node"] == cluster.host(1)) {
      EXPECT_EQ(f["finding"]["device"].get<std::string>().rfind("GPU7 0000:db:00.0", 0), 0u) << f.dump();
    } else {
      EXPECT_EQ(f["node"], cluster.host(2)) << f.dump();
      EXPECT_EQ(f["finding"]["observed"], "BF16 GEMM 250.0 TFLOPS") << f.dump();
      EXPECT_NE(f["finding"]["expected_from"].get<std::string>().find("of NVIDIA H100 80GB HBM3 GPUs across 3 nodes"),
                std::string::npos)
          << f.dump();
      ++on_host_2;
    }
  }
  EXPECT_EQ(on_host_2, 8u) << r.out;
  EXPECT_EQ(count_of(stress_checks(report), "gpu_peer_copy"), 84u) << r.out;  // 28 pairs on each host
}

TEST_F(GpuStress, GpusTheCudaRuntimeCannotMeasureAreUnknownNeverAPass) {
  // Two GPUs on the PCI bus and in NVML, none the CUDA runtime may use (CUDA_VISIBLE_DEVICES
  // empty hides them all, from the real runtime as from the fake, first on the library path
  // whatever this machine has): nothing answers.
  NodeTree tree;
  tree.healthy_gpu_node();
  std::vector<std::string> env = fake_gpu_libraries("two-gpus-healthy");
  env.push_back("CUDA_VISIBLE_DEVICES=");
  std::vector<std::string> on_the_tree = env;
  on_the_tree.push_back("MUSTER_HEALTH_FSROOT=" + tree.root());
  auto r = run_muster({"health", "--stress", "--json"}, on_the_tree);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;  // unknowns are allowed unless --strict
  auto report = nlohmann::json::parse(r.out);
  const auto checks = stress_checks(report);
  ASSERT_EQ(checks.size(), 1u) << r.out;
  EXPECT_EQ(checks[0]["name"], "gpu_stress");
  EXPECT_EQ(checks[0]["finding"]["status"], "unknown") << checks[0].dump();
  EXPECT_EQ(checks[0]["finding"]["observed"].get<std::string>().rfind("not measured: ", 0), 0u) << checks[0].dump();
  EXPECT_EQ(run_muster({"health", "--stress", "--strict"}, on_the_tree).exit_code, 1);
  // A node with no NVIDIA GPU on its bus: nothing to measure is said as such.
  NodeTree cpu_only;
  NodeTree::Link gen5;
  cpu_only.pci("0000:3a:00.0", "0x060400", "0x1000", &gen5);
  cpu_only.pci("0000:3b:00.0", "0x020700", "0x15b3", &gen5, "0000:3a:00.0");
  std::vector<std::string> on_a_cpu_node = env;
  on_a_cpu_node.push_back("MUSTER_HEALTH_FSROOT=" + cpu_only.root());
  auto here = nlohmann::json::parse(run_muster({"health", "--stress", "--json"}, on_a_cpu_node).out);
  const auto mine = stress_checks(here);
  ASSERT_EQ(mine.size(), 1u) << here.dump();
  EXPECT_EQ(mine[0]["finding"]["status"], "absent") << mine[0].dump();
}

TEST(GpuStressWithoutGpus, StressOnASnapshotIsAUsageError) {
  TempDir dir;
  auto r = run_muster({"health", "--stress", "--fsroot", dir.path()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--stress measures this node's GPUs"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace muster::testing
