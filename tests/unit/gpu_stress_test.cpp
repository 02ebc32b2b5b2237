// The GPU stress tests' judging, on figures a test writes (the numbers the CUDA runtime would
// have measured) and a recording fake of the GPU libraries: the one slow GPU or pair is named
// with its figure, its bar and the likely cause, a healthy node passes, and what could not be
// measured or compared is unknown.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "launcher/job/health_check.h"
#include "tests/support/node_tree.h"
#include "topology/health/gpu_stress.h"
#include "topology/health/health.h"

namespace muster {
namespace {

std::string bus_of(size_t i) { return fmt::format("0000:{:02x}:00.0", 0x18 + 0x10 * i); }

// `n` H100s whose figures are what a healthy HGX node measures.
StressMeasurements healthy(size_t n) {
  StressMeasurements m;
  for (size_t i = 0; i < n; ++i) {
    GpuStressFigures g;
    g.device = int(i);
    g.bus_id = bus_of(i);
    g.h2d.value = 53;
    g.d2h.value = 54;
    g.h2d_all.value = 50;
    g.d2h_all.value = 51;
    g.hbm.value = 2600;
    g.gemm.value = 650;
    m.gpus.push_back(g);
  }
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b)
      if (a != b) m.peers.push_back({a, b, true, {370.0, ""}});
  m.seconds = 1.5;
  return m;
}

// What NVML and sysfs say of them: NVSwitched (18 NVLinks a pair), Gen5 x16, clocks at their most.
StressContext context_of(size_t n) {
  StressContext c;
  for (size_t i = 0; i < n; ++i) {
    GpuHealthReading r;
    r.index = unsigned(i);
    r.bus_id = bus_of(i);
    r.name = "NVIDIA H100 80GB HBM3";
    r.uuid = fmt::format("GPU-8b0c0000-0000-4000-8000-00000000000{}", i);
    r.throttle_reasons = 0;
    r.sm_clock_mhz = 1980;
    r.max_sm_clock_mhz = 1980;
    c.nvml.push_back(r);
    c.links.push_back(StressLink{{16, 32}, {16, 32}});
  }
  c.nvlinks.assign(n, std::vector<int>(n, 18));
  for (size_t i = 0; i < n; ++i) c.nvlinks[i][i] = 0;
  return c;
}

std::vector<HealthFinding> failures(const std::vector<HealthFinding>& all) {
  std::vector<HealthFinding> out;
  for (const auto& f : all)
    if (f.status != HealthStatus::Pass) out.push_back(f);
  return out;
}

std::string dump(const std::vector<HealthFinding>& all) {
  std::string out;
  for (const auto& f : all) out += std::string(health_status_name(f.status)) + " " + f.check + " " + f.summary() + "\n";
  return out;
}

PeerStressFigure& peer(StressMeasurements& m, size_t from, size_t to) {
  for (auto& p : m.peers)
    if (p.from == from && p.to == to) return p;
  throw std::runtime_error("no such pair");
}

TEST(GpuStressJudge, HealthyTwoAndEightGpuNodesPassWithEveryFigureInTheValues) {
  for (size_t n : {2u, 8u}) {
    const auto findings = judge_gpu_stress(healthy(n), context_of(n));
    EXPECT_TRUE(failures(findings).empty()) << dump(findings);
    EXPECT_EQ(findings.size(), 3 * n + n * (n - 1) / 2) << dump(findings);
    for (const auto& f : findings) {
      SCOPED_TRACE(f.summary());
      if (f.check == "gpu_host_copy") {
        EXPECT_EQ(f.values.at("h2d_gigabytes_per_second"), 53);
        EXPECT_EQ(f.values.at("d2h_all_gigabytes_per_second"), 51);
      }
      if (f.check == "gpu_memory_bandwidth") {
        EXPECT_EQ(f.values.at("hbm_gigabytes_per_second"), 2600);
      }
      if (f.check == "gpu_gemm") {
        EXPECT_EQ(f.values.at("gemm_teraflops"), 650);
        EXPECT_EQ(f.values.at("sm_clock_megahertz"), 1980);
      }
      if (f.check == "gpu_peer_copy") {
        EXPECT_EQ(f.values.at("forward_gigabytes_per_second"), 370);
        EXPECT_EQ(f.values.at("backward_gigabytes_per_second"), 370);
        EXPECT_EQ(f.values.at("nvlinks"), 18);
      }
    }
  }
}

TEST(GpuStressJudge, OneGpuWithSlowHostCopiesFailsNamedByIndexBusIdAndUuid) {
  auto m = healthy(8);
  m.gpus[3].h2d.value = 12;
  const auto bad = failures(judge_gpu_stress(m, context_of(8)));
  ASSERT_EQ(bad.size(), 1u) << dump(bad);
  EXPECT_EQ(bad[0].check, "gpu_host_copy");
  EXPECT_EQ(bad[0].status, HealthStatus::Fail);
  EXPECT_EQ(bad[0].device, "GPU3 0000:48:00.0 NVIDIA H100 80GB HBM3 GPU-8b0c0000-0000-4000-8000-000000000003");
  EXPECT_EQ(bad[0].observed, "H2D 12.0 GB/s");
  EXPECT_EQ(bad[0].expected, "at least 37.1 GB/s");
  EXPECT_EQ(bad[0].expected_from, "0.7x the median of its 7 peers, 53.0 GB/s (checks.stress_peer_ratio)");
  EXPECT_NE(bad[0].remedy.find("no throttle reason nor degraded link"), std::string::npos) << bad[0].remedy;
}

TEST(GpuStressJudge, ALinkTrainedBelowItsBestIsTheLikelyCause) {
  auto m = healthy(2);
  m.gpus[1].h2d.value = 26;
  m.gpus[1].d2h.value = 26;
  auto c = context_of(2);
  c.links[1] = StressLink{{8, 32}, {16, 32}};
  const auto bad = failures(judge_gpu_stress(m, c));
  ASSERT_EQ(bad.size(), 1u) << dump(bad);
  EXPECT_EQ(bad[0].observed, "H2D 26.0 GB/s; D2H 26.0 GB/s");
  EXPECT_NE(bad[0].remedy.find("likely cause: PCIe link at x8 32 GT/s, below its x16 32 GT/s"), std::string::npos)
      << bad[0].remedy;
}

TEST(GpuStressJudge, AHostCopyFarBelowItsLinkFailsEvenWithoutPeers) {
  auto m = healthy(1);
  m.gpus[0].d2h.value = 20;  // Gen5 x16 carries 63 GB/s each way
  const auto bad = failures(judge_gpu_stress(m, context_of(1)));
  ASSERT_GE(bad.size(), 1u) << dump(bad);
  EXPECT_EQ(bad[0].check, "gpu_host_copy");
  EXPECT_EQ(bad[0].status, HealthStatus::Fail);
  EXPECT_EQ(bad[0].expected, "at least 31.5 GB/s");
  EXPECT_NE(bad[0].expected_from.find("PCIe link at its best, x16 32 GT/s"), std::string::npos) << bad[0].expected_from;
}

TEST(GpuStressJudge, OneGpuWithSlowMemoryFailsAlone) {
  auto m = healthy(8);
  m.gpus[6].hbm.value = 1200;
  const auto bad = failures(judge_gpu_stress(m, context_of(8)));
  ASSERT_EQ(bad.size(), 1u) << dump(bad);
  EXPECT_EQ(bad[0].check, "gpu_memory_bandwidth");
  EXPECT_EQ(bad[0].device.rfind("GPU6 0000:78:00.0", 0), 0u) << bad[0].device;
  EXPECT_EQ(bad[0].observed, "copy within the GPU 1200.0 GB/s");
}

TEST(GpuStressJudge, OneSlowPairFailsNamingBothGpusAndNoOther) {
  auto m = healthy(8);
  peer(m, 2, 5).gbps.value = 90;
  const auto bad = failures(judge_gpu_stress(m, context_of(8)));
  ASSERT_EQ(bad.size(), 1u) << dump(bad);
  EXPECT_EQ(bad[0].check, "gpu_peer_copy");
  EXPECT_EQ(bad[0].device.rfind("GPU2 0000:38:00.0", 0), 0u) << bad[0].device;
  EXPECT_NE(bad[0].device.find(" <-> GPU5 0000:68:00.0"), std::string::npos) << bad[0].device;
  EXPECT_EQ(bad[0].observed, "GPU2 to GPU5 90.0 GB/s");
  EXPECT_EQ(bad[0].values.at("forward_gigabytes_per_second"), 90);
}

TEST(GpuStressJudge, AllPairsSlowAgainstTheirNvlinksFailOnTheHardwareBar) {
  auto m = healthy(2);
  for (auto& p : m.peers) p.gbps.value = 100;  // 18 NVLinks carry 450 GB/s
  const auto bad = failures(judge_gpu_stress(m, context_of(2)));
  ASSERT_EQ(bad.size(), 1u) << dump(bad);
  EXPECT_EQ(bad[0].expected, "at least 225.0 GB/s; at least 225.0 GB/s");
  EXPECT_NE(bad[0].expected_from.find("the 450 GB/s of its 18 NVLinks"), std::string::npos) << bad[0].expected_from;
}

TEST(GpuStressJudge, PairsWithFewerNvlinksAreComparedOnlyWithTheirLike) {
  // Four GPUs without a switch: 0-1 and 2-3 by four links, the others by two.
  auto m = healthy(4);
  auto c = context_of(4);
  for (size_t a = 0; a < 4; ++a)
    for (size_t b = 0; b < 4; ++b)
      if (a != b) c.nvlinks[a][b] = (a / 2 == b / 2) ? 4 : 2;
  for (auto& p : m.peers) p.gbps.value = c.nvlinks[p.from][p.to] * 22.0;
  const auto findings = judge_gpu_stress(m, c);
  EXPECT_TRUE(failures(findings).empty()) << dump(findings);
}

TEST(GpuStressJudge, ASlowGemmNamesTheThrottleReasonAndClockReadThen) {
  auto m = healthy(8);
  m.gpus[7].gemm.value = 300;
  auto c = context_of(8);
  c.nvml[7]->throttle_reasons = throttle::kSwPowerCap;
  c.nvml[7]->sm_clock_mhz = 1200;
  const auto bad = failures(judge_gpu_stress(m, c));
  ASSERT_EQ(bad.size(), 1u) << dump(bad);
  EXPECT_EQ(bad[0].check, "gpu_gemm");
  EXPECT_EQ(bad[0].observed, "BF16 GEMM 300.0 TFLOPS at an SM clock of 1200 MHz");
  EXPECT_EQ(bad[0].expected, "at least 455.0 TFLOPS");
  EXPECT_NE(bad[0].remedy.find("clocks held down by power cap"), std::string::npos) << bad[0].remedy;
  EXPECT_NE(bad[0].remedy.find("SM clock 1200 MHz of its 1980 MHz"), std::string::npos) << bad[0].remedy;
}

TEST(GpuStressJudge, TheBarIsTheClusterFilesRatio) {
  auto m = healthy(2);
  m.gpus[1].hbm.value = 1000;
  auto c = context_of(2);
  c.settings.peer_ratio = 0.3;
  EXPECT_TRUE(failures(judge_gpu_stress(m, c)).empty());
  c.settings.peer_ratio = 0.7;
  EXPECT_EQ(failures(judge_gpu_stress(m, c)).size(), 1u);
}

TEST(GpuStressJudge, AFigureNotMeasuredOrWithNothingToCompareIsUnknownNeverAPass) {
  auto m = healthy(3);
  m.gpus[0].gemm.value.reset();
  m.gpus[0].gemm.why_not = "cuBLAS (libcublas.so) is not installed on this node";
  const auto bad = failures(judge_gpu_stress(m, context_of(3)));
  ASSERT_EQ(bad.size(), 1u) << dump(bad);
  EXPECT_EQ(bad[0].status, HealthStatus::Unknown);
  EXPECT_EQ(bad[0].observed, "BF16 GEMM not measured: cuBLAS (libcublas.so) is not installed on this node");
  // One GPU has no peers, and a GEMM no hardware figure: unknown, though measured.
  auto one = judge_gpu_stress(healthy(1), context_of(1));
  for (const auto& f : one)
    if (f.check == "gpu_gemm" || f.check == "gpu_memory_bandwidth") {
      EXPECT_EQ(f.status, HealthStatus::Unknown) << f.summary();
    }
}

// The GPU libraries of a test: answer NVML from a reading and the stress tests from figures,
// recording the budget they were given.
class RecordingGpuLibraries : public GpuLibraries {
 public:
  std::optional<StressMeasurements> figures;
  std::vector<std::chrono::milliseconds> budgets;
  std::optional<NvmlHealthReading> nvml;         // unset: no NVML
  std::optional<NvmlAfterStress> after_stress;   // unset: NVML does not answer after the load
  size_t nvml_reads = 0;
  std::vector<std::vector<std::string>> after_stress_asked;
  std::optional<NvmlHealthReading> read_nvml(std::string& why) override {
    ++nvml_reads;
    if (!nvml) why = "no NVML in this test";
    return nvml;
  }
  std::optional<NvmlAfterStress> read_after_stress(const std::vector<std::string>& bus_ids, std::string& why) override {
    after_stress_asked.push_back(bus_ids);
    if (!after_stress) why = "no NVML in this test";
    return after_stress;
  }
  NcclReading read_nccl() override { return {}; }
  std::optional<StressMeasurements> measure_stress(std::chrono::milliseconds budget, std::string& why) override {
    budgets.push_back(budget);
    if (!figures) why = "the CUDA runtime (libcudart.so) is not installed on this node";
    return figures;
  }
};

std::vector<HealthFinding> findings_starting(const NodeHealth& h, const std::string& prefix) {
  std::vector<HealthFinding> out;
  for (const auto& f : h.findings)
    if (f.check.rfind(prefix, 0) == 0) out.push_back(f);
  return out;
}

TEST(GpuStressFamily, MeasuresOnlyWhenAskedWithinTheBudgetAndJudges) {
  testing::NodeTree tree;
  tree.healthy_gpu_node();
  RecordingGpuLibraries gpus;
  gpus.figures = healthy(2);
  gpus.figures->gpus[1].hbm.value = 500;
  HealthExpectations expect;
  auto quiet = check_node_health({tree.root(), &gpus}, expect);
  EXPECT_TRUE(gpus.budgets.empty());
  for (const char* check : {"gpu_host_copy", "gpu_memory_bandwidth", "gpu_gemm", "gpu_peer_copy", "gpu_stress"})
    EXPECT_TRUE(findings_starting(quiet, check).empty()) << check << " without stress asked: " << dump(quiet.findings);
  EXPECT_TRUE(gpus.after_stress_asked.empty());
  expect.stress.run = true;
  auto h = check_node_health({tree.root(), &gpus}, expect);
  ASSERT_EQ(gpus.budgets.size(), 1u);
  EXPECT_EQ(gpus.budgets[0], kStressBudget);
  const auto bad = failures(findings_starting(h, "gpu_memory_bandwidth"));
  ASSERT_EQ(bad.size(), 1u) << dump(h.findings);
  EXPECT_EQ(bad[0].device, "GPU1 0000:28:00.0");  // NVML did not answer: the CUDA ordinal and bus id
  const auto summary = findings_starting(h, "gpu_stress");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0].values.at("seconds"), 1.5);
}

TEST(GpuStressFamily, NamesComeFromTheNodesNvmlReadingAndCausesFromOneReadingAfterTheLoad) {
  testing::NodeTree tree;
  tree.healthy_gpu_node();
  RecordingGpuLibraries gpus;
  gpus.figures = healthy(2);
  gpus.figures->gpus[1].gemm.value = 300;
  const StressContext known = context_of(2);
  gpus.nvml = NvmlHealthReading{"550.54.15", 12040, 2, {*known.nvml[0], *known.nvml[1]}};
  // Before the load the clocks were at their most; right after it GPU1's were held down.
  gpus.after_stress = NvmlAfterStress{{GpuClocksReading{0, 1980, 1980}, GpuClocksReading{throttle::kHwSlowdown, 990, 1980}},
                                      {{0, 18}, {18, 0}}};
  HealthExpectations expect;
  expect.stress.run = true;
  auto h = check_node_health({tree.root(), &gpus}, expect);
  EXPECT_EQ(gpus.nvml_reads, 1u) << "NVML read again for the stress tests";
  ASSERT_EQ(gpus.after_stress_asked.size(), 1u);
  EXPECT_EQ(gpus.after_stress_asked[0], (std::vector<std::string>{bus_of(0), bus_of(1)}));
  const auto bad = failures(findings_starting(h, "gpu_gemm"));
  ASSERT_EQ(bad.size(), 1u) << dump(h.findings);
  EXPECT_EQ(bad[0].device, "GPU1 0000:28:00.0 NVIDIA H100 80GB HBM3 GPU-8b0c0000-0000-4000-8000-000000000001");
  EXPECT_NE(bad[0].remedy.find("clocks held down by hardware slowdown"), std::string::npos) << bad[0].remedy;
  EXPECT_NE(bad[0].remedy.find("SM clock 990 MHz of its 1980 MHz"), std::string::npos) << bad[0].remedy;
  const auto pairs = findings_starting(h, "gpu_peer_copy");
  ASSERT_EQ(pairs.size(), 1u) << dump(h.findings);
  EXPECT_EQ(pairs[0].values.at("nvlinks"), 18);
}

TEST(GpuStressFamily, NothingMeasurableIsUnknownWithTheReason) {
  testing::NodeTree tree;
  tree.healthy_gpu_node();
  RecordingGpuLibraries gpus;
  HealthExpectations expect;
  expect.stress.run = true;
  auto h = check_node_health({tree.root(), &gpus}, expect);
  const auto found = findings_starting(h, "gpu_stress");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].status, HealthStatus::Unknown);
  EXPECT_EQ(found[0].observed, "not measured: the CUDA runtime (libcudart.so) is not installed on this node");
}

TEST(GpuStressAcrossNodes, ANodeWhoseGpusAreSlowAlikeFailsAgainstItsModelAcrossTheCluster) {
  // Four nodes of eight H100s; node 2's all run their GEMM at 300 TFLOPS, so it passes alone.
  std::vector<NodeHealth> nodes(4);
  for (size_t k = 0; k < nodes.size(); ++k) {
    auto m = healthy(8);
    if (k == 2)
      for (auto& g : m.gpus) g.gemm.value = 300;
    nodes[k].findings = judge_gpu_stress(m, context_of(8));
    nodes[k].software.gpu_model = "NVIDIA H100 80GB HBM3";
    ASSERT_TRUE(failures(nodes[k].findings).empty()) << dump(nodes[k].findings);
  }
  std::vector<const NodeHealth*> all;
  for (const auto& n : nodes) all.push_back(&n);
  const auto slow = stress_across_nodes(all, 0.7);
  for (size_t k : {0u, 1u, 3u}) EXPECT_TRUE(slow[k].empty()) << k << ": " << dump(slow[k]);
  ASSERT_EQ(slow[2].size(), 8u) << dump(slow[2]);
  EXPECT_EQ(slow[2][0].check, "gpu_gemm");
  EXPECT_EQ(slow[2][0].status, HealthStatus::Fail);
  EXPECT_EQ(slow[2][0].observed, "BF16 GEMM 300.0 TFLOPS");  // worded as on the node
  EXPECT_EQ(slow[2][0].expected, "at least 455.0 TFLOPS");
  EXPECT_NE(slow[2][0].expected_from.find("of NVIDIA H100 80GB HBM3 GPUs across 4 nodes"), std::string::npos)
      << slow[2][0].expected_from;
  // Another model is not its peer: alone in its model, nothing is said. Each GPU is compared
  // by its own model, not by the node's first GPU's.
  auto pcie = healthy(8);
  for (auto& g : pcie.gpus) g.gemm.value = 300;
  StressContext pcie_context = context_of(8);
  for (auto& r : pcie_context.nvml) r->name = "NVIDIA H100 PCIe";
  nodes[2].findings = judge_gpu_stress(pcie, pcie_context);
  EXPECT_TRUE(stress_across_nodes(all, 0.7)[2].empty()) << dump(stress_across_nodes(all, 0.7)[2]);
}

}  // namespace
}  // namespace muster
