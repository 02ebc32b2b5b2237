// The health checks, each on fixture trees in the kernel's own formats and a recording fake
// of the GPU libraries: pass, fail and unknown for every check, and the comparisons across
// nodes the head makes.
#include <algorithm>

#include <gtest/gtest.h>

#include "launcher/job/health_check.h"
#include "launcher/remote/health_report.h"
#include "tests/support/node_tree.h"
#include "topology/health/health.h"

namespace muster {
namespace {

using testing::NodeTree;

// The GPU libraries as a test describes them; records what was asked.
class FakeGpuLibraries : public GpuLibraries {
 public:
  std::optional<NvmlHealthReading> nvml;
  std::string why_not = "libnvidia-ml.so.1 did not load";
  NcclReading nccl{22105, "", false};
  int nvml_reads = 0;

  std::optional<NvmlHealthReading> read_nvml(std::string& why) override {
    ++nvml_reads;
    if (!nvml) why = why_not;
    return nvml;
  }
  NcclReading read_nccl() override { return nccl; }

  // Two healthy H100s at the bus ids of NodeTree::healthy_gpu_node.
  static NvmlHealthReading two_healthy_gpus() {
    NvmlHealthReading r;
    r.driver_version = "550.54.15";
    r.cuda_driver_version = 12040;
    r.device_count = 2;
    for (unsigned i = 0; i < 2; ++i) {
      GpuHealthReading g;
      g.index = i;
      g.bus_id = i == 0 ? "0000:18:00.0" : "0000:2a:00.0";
      g.name = "NVIDIA H100 80GB HBM3";
      g.persistence_mode = true;
      g.ecc_enabled = true;
      g.ecc_volatile_uncorrected = 0;
      g.ecc_aggregate_uncorrected = 0;
      g.row_remaps = RowRemapReading{};
      g.throttle_reasons = throttle::kGpuIdle;
      for (unsigned l = 0; l < 18; ++l) g.nvlinks.push_back({l, true, 0, 0, 0, 0});
      g.temperature_c = 40;
      g.slowdown_temperature_c = 90;
      r.gpus.push_back(g);
    }
    return r;
  }
};

NodeHealth check(const NodeTree& tree, GpuLibraries* gpus, const HealthExpectations& expect = {}) {
  return check_node_health({tree.root(), gpus}, expect);
}

std::vector<HealthFinding> of(const NodeHealth& h, const std::string& check) {
  std::vector<HealthFinding> out;
  for (const auto& f : h.findings)
    if (f.check == check) out.push_back(f);
  return out;
}

std::string all(const NodeHealth& h) {
  std::string out;
  for (const auto& f : h.findings) out += std::string(health_status_name(f.status)) + " " + f.check + ": " + f.summary() + "\n";
  return out;
}

bool any_status(const NodeHealth& h, HealthStatus s) {
  return std::any_of(h.findings.begin(), h.findings.end(), [&](const HealthFinding& f) { return f.status == s; });
}

// ---- the kernel's formats ----

TEST(HealthFormats, LinkSpeedsRatesAndGenerations) {
  EXPECT_EQ(parse_link_speed("16.0 GT/s PCIe"), 16.0);
  EXPECT_EQ(parse_link_speed("8 GT/s"), 8.0);
  EXPECT_EQ(parse_link_speed("2.5 GT/s PCIe"), 2.5);
  EXPECT_FALSE(parse_link_speed("Unknown"));
  EXPECT_FALSE(parse_link_speed(""));
  EXPECT_EQ(pcie_generation(2.5), 1);
  EXPECT_EQ(pcie_generation(8.0), 3);
  EXPECT_EQ(pcie_generation(32.0), 5);
  EXPECT_EQ(parse_ib_rate("200 Gb/sec (4X HDR)"), 200.0);
  EXPECT_EQ(parse_ib_rate("2.5 Gb/sec (1X SDR)"), 2.5);
  EXPECT_FALSE(parse_ib_rate("rate"));
}

// ---- PCIe ----

TEST(HealthPcie, AHealthyNodePassesEveryLinkOfItsGpusNicsAndBridges) {
  NodeTree tree;
  tree.healthy_gpu_node();
  auto h = check(tree, nullptr);
  auto pcie = of(h, "pcie_link");
  ASSERT_EQ(pcie.size(), 1u) << all(h);
  EXPECT_EQ(pcie[0].status, HealthStatus::Pass);
  EXPECT_EQ(pcie[0].values.at("pcie_links_checked"), 6);  // 2 GPUs, 1 HCA, 3 switch ports
}

TEST(HealthPcie, AGpuTrainedAtX8FailsNamingItAndBothWidths) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.write("sys/devices/pci0000:00/0000:29:00.0/0000:2a:00.0/current_link_width", "8");
  auto h = check(tree, nullptr);
  auto pcie = of(h, "pcie_link");
  ASSERT_EQ(pcie.size(), 1u) << all(h);
  EXPECT_EQ(pcie[0].status, HealthStatus::Fail);
  EXPECT_EQ(pcie[0].device, "GPU1 0000:2a:00.0");
  EXPECT_NE(pcie[0].observed.find("x8 at 32.0 GT/s"), std::string::npos) << pcie[0].observed;
  EXPECT_EQ(pcie[0].expected, "x16 at 32.0 GT/s (Gen5)");
  EXPECT_EQ(pcie[0].expected_from, "the link's maximum");
  EXPECT_FALSE(pcie[0].remedy.empty());
}

TEST(HealthPcie, AnIdleGpusSlowLinkWarnsWhereANicsFails) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.write("sys/devices/pci0000:00/0000:17:00.0/0000:18:00.0/current_link_speed", "2.5 GT/s PCIe");
  tree.write("sys/devices/pci0000:00/0000:3a:00.0/0000:3b:00.0/current_link_speed", "16.0 GT/s PCIe");
  auto pcie = of(check(tree, nullptr), "pcie_link");
  ASSERT_EQ(pcie.size(), 2u);
  EXPECT_EQ(pcie[0].device, "GPU0 0000:18:00.0");
  EXPECT_EQ(pcie[0].status, HealthStatus::Warn);  // GPUs lower their speed when idle
  EXPECT_EQ(pcie[1].device, "mlx5_0 0000:3b:00.0");
  EXPECT_EQ(pcie[1].status, HealthStatus::Fail);
}

TEST(HealthPcie, ACardFasterThanItsSlotIsHealthyAndADegradedBridgeIsNamed) {
  NodeTree tree;
  NodeTree::Link gen4{"16.0 GT/s PCIe", "16.0 GT/s PCIe", "16", "16"};
  NodeTree::Link gen5_card_in_gen4{"16.0 GT/s PCIe", "32.0 GT/s PCIe", "16", "16"};
  NodeTree::Link narrow_uplink{"16.0 GT/s PCIe", "16.0 GT/s PCIe", "4", "16"};
  tree.pci("0000:3a:00.0", "0x060400", "0x8086", &gen4);
  tree.pci("0000:3b:00.0", "0x020000", "0x15b3", &gen5_card_in_gen4, "0000:3a:00.0");
  auto healthy = check(tree, nullptr);
  EXPECT_EQ(of(healthy, "pcie_link").at(0).status, HealthStatus::Pass) << all(healthy);

  tree.pci("0000:50:00.0", "0x060400", "0x8086", &narrow_uplink);
  tree.pci("0000:51:00.0", "0x060400", "0x8086", &gen4, "0000:50:00.0");
  tree.pci("0000:52:00.0", "0x020000", "0x15b3", &gen4, "0000:51:00.0");
  auto pcie = of(check(tree, nullptr), "pcie_link");
  ASSERT_EQ(pcie.size(), 1u);
  EXPECT_EQ(pcie[0].status, HealthStatus::Fail);
  EXPECT_NE(pcie[0].device.find("bridge 0000:50:00.0"), std::string::npos) << pcie[0].device;
}

TEST(HealthPcie, TheClusterFilesExpectationOverridesTheGpusMaximum) {
  NodeTree tree;
  tree.healthy_gpu_node();
  HealthExpectations expect;
  expect.pcie_gen = 5;
  expect.pcie_width = 16;
  EXPECT_EQ(of(check(tree, nullptr, expect), "pcie_link").at(0).status, HealthStatus::Pass);
  tree.write("sys/devices/pci0000:00/0000:17:00.0/0000:18:00.0/max_link_width", "8");
  tree.write("sys/devices/pci0000:00/0000:17:00.0/0000:18:00.0/current_link_width", "8");
  auto pcie = of(check(tree, nullptr, expect), "pcie_link");  // at its maximum, below the file's
  ASSERT_EQ(pcie.size(), 1u);
  EXPECT_EQ(pcie[0].status, HealthStatus::Fail);
  EXPECT_EQ(pcie[0].expected_from, "expect.pcie_gen and expect.pcie_width");
}

TEST(HealthPcie, AerCountersFailUncorrectableAndWarnCorrectable) {
  NodeTree tree;
  tree.healthy_gpu_node();
  const std::string gpu = "sys/devices/pci0000:00/0000:17:00.0/0000:18:00.0/";
  tree.write(gpu + "aer_dev_fatal", "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 2\nTOTAL_ERR_FATAL 2");
  tree.write(gpu + "aer_dev_correctable", "RxErr 5\nBadTLP 0\nTOTAL_ERR_COR 5");
  tree.write(gpu + "aer_dev_nonfatal", "Undefined 0\nTOTAL_ERR_NONFATAL 0");
  auto aer = of(check(tree, nullptr), "pcie_aer");
  ASSERT_EQ(aer.size(), 2u);
  EXPECT_EQ(aer[0].status, HealthStatus::Fail);
  EXPECT_NE(aer[0].observed.find("2 fatal"), std::string::npos);
  EXPECT_EQ(aer[1].status, HealthStatus::Warn);
  EXPECT_NE(aer[1].observed.find("5 correctable"), std::string::npos);
}

TEST(HealthPcie, NoSysfsIsUnknownAndOnlyConventionalPciIsNothingToCheck) {
  NodeTree empty;
  auto unknown = of(check(empty, nullptr), "pcie_link");
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0].status, HealthStatus::Unknown);

  NodeTree vm;  // this machine's kind: a virtio NIC without link attributes
  vm.pci("0000:00:03.0", "0x020000", "0x1af4", nullptr);
  auto absent = of(check(vm, nullptr), "pcie_link");
  ASSERT_EQ(absent.size(), 1u);
  EXPECT_EQ(absent[0].status, HealthStatus::Absent);

  NodeTree snapshot;  // a GPU whose link attributes the snapshot lacks
  snapshot.pci("0000:18:00.0", "0x030200", "0x10de", nullptr);
  EXPECT_EQ(of(check(snapshot, nullptr), "pcie_link").at(0).status, HealthStatus::Unknown);
}

// ---- InfiniBand ----

TEST(HealthIb, APortDownAtALowerRateFailsWithItsStates) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.ib_port("mlx5_0", "0000:3b:00.0", 2, "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)");
  auto ib = of(check(tree, nullptr), "ib_port");
  ASSERT_EQ(ib.size(), 1u);
  EXPECT_EQ(ib[0].status, HealthStatus::Fail);
  EXPECT_EQ(ib[0].device, "mlx5_0 port 2 (0000:3b:00.0)");
  EXPECT_NE(ib[0].observed.find("state 1: DOWN, phys_state 3: Disabled"), std::string::npos);
  EXPECT_EQ(ib[0].expected, "4: ACTIVE, 5: LinkUp");
}

TEST(HealthIb, AnActivePortBelowItsPeersOrTheExpectedRateFails) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.ib_port("mlx5_0", "0000:3b:00.0", 2, "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)");
  tree.ib_port("mlx5_0", "0000:3b:00.0", 3, "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)");
  auto ib = of(check(tree, nullptr), "ib_port");
  ASSERT_EQ(ib.size(), 1u);
  EXPECT_EQ(ib[0].status, HealthStatus::Fail);
  EXPECT_EQ(ib[0].device, "mlx5_0 port 3 (0000:3b:00.0)");
  EXPECT_EQ(ib[0].expected, "400 Gb/sec");
  EXPECT_EQ(ib[0].expected_from, "most ports of this node");

  HealthExpectations expect;
  expect.ib_rate_gbps = 800;
  expect.ib_ports = 4;
  auto strict = of(check(tree, nullptr, expect), "ib_port");
  EXPECT_EQ(strict.size(), 4u);  // too few ports, and each of the three below 800
  EXPECT_EQ(strict[0].expected_from, "expect.ib_ports");
}

TEST(HealthIb, NoHcaIsNothingToCheckAndAnUnreadableStateIsUnknown) {
  NodeTree none;
  EXPECT_EQ(of(check(none, nullptr), "ib_port").at(0).status, HealthStatus::Absent);
  NodeTree tree;
  tree.healthy_gpu_node();
  std::filesystem::remove(tree.root() + "/sys/class/infiniband/mlx5_0/ports/1/phys_state");
  EXPECT_EQ(of(check(tree, nullptr), "ib_port").at(0).status, HealthStatus::Unknown);
}

TEST(HealthIb, CountersThatGrowDuringTheRunAreNamed) {
  NodeTree tree;
  tree.healthy_gpu_node();
  auto before = read_health_counters(tree.root());
  EXPECT_TRUE(counter_growth(before, read_health_counters(tree.root())).empty());
  tree.ib_counter("mlx5_0", 1, "symbol_error", 7);
  auto grown = counter_growth(before, read_health_counters(tree.root()));
  ASSERT_EQ(grown.size(), 1u);
  EXPECT_EQ(grown[0].status, HealthStatus::Warn);
  EXPECT_EQ(grown[0].device, "mlx5_0 port 1 (0000:3b:00.0)");
  EXPECT_NE(grown[0].observed.find("symbol_error +7"), std::string::npos);
  tree.ib_counter("mlx5_0", 1, "link_downed", 1);
  EXPECT_EQ(counter_growth(before, read_health_counters(tree.root())).at(0).status, HealthStatus::Fail);
}

// ---- GPUs ----

TEST(HealthGpus, HealthyGpusPassAndARowRemapPendingFailsNamingTheGpu) {
  NodeTree tree;
  tree.healthy_gpu_node();
  FakeGpuLibraries gpus;
  gpus.nvml = FakeGpuLibraries::two_healthy_gpus();
  auto healthy = check(tree, &gpus);
  EXPECT_FALSE(any_status(healthy, HealthStatus::Fail)) << all(healthy);
  EXPECT_FALSE(any_status(healthy, HealthStatus::Unknown)) << all(healthy);
  EXPECT_EQ(of(healthy, "gpu").at(0).status, HealthStatus::Pass);

  gpus.nvml->gpus[1].row_remaps = RowRemapReading{0, 1, true, false};
  auto sick = of(check(tree, &gpus), "gpu_memory");
  ASSERT_EQ(sick.size(), 1u);
  EXPECT_EQ(sick[0].status, HealthStatus::Fail);
  EXPECT_EQ(sick[0].device, "GPU1 0000:2a:00.0 NVIDIA H100 80GB HBM3");
  EXPECT_NE(sick[0].observed.find("row remap pending"), std::string::npos);
}

TEST(HealthGpus, EccThrottlingNvlinksAndTemperature) {
  NodeTree tree;
  tree.healthy_gpu_node();
  FakeGpuLibraries gpus;
  gpus.nvml = FakeGpuLibraries::two_healthy_gpus();
  auto& g = gpus.nvml->gpus[0];
  g.ecc_volatile_uncorrected = 3;
  g.throttle_reasons = throttle::kHwSlowdown | throttle::kGpuIdle;
  g.nvlinks[4].active = false;
  g.temperature_c = 91;
  gpus.nvml->gpus[1].throttle_reasons = throttle::kSwThermalSlowdown;
  auto h = check(tree, &gpus);
  EXPECT_EQ(of(h, "gpu_ecc").at(0).status, HealthStatus::Fail);
  auto clocks = of(h, "gpu_clocks");
  ASSERT_EQ(clocks.size(), 2u);
  EXPECT_EQ(clocks[0].status, HealthStatus::Fail);
  EXPECT_NE(clocks[0].observed.find("hardware slowdown"), std::string::npos);
  EXPECT_EQ(clocks[1].status, HealthStatus::Warn);
  auto links = of(h, "gpu_nvlink");
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].observed, "NVLink 4 of 18 down");
  EXPECT_EQ(of(h, "gpu_temperature").at(0).status, HealthStatus::Fail);
}

TEST(HealthGpus, AGpuOnTheBusThatNvmlCannotOpenHasFallenOffIt) {
  NodeTree tree;
  tree.healthy_gpu_node();
  FakeGpuLibraries gpus;
  gpus.nvml = FakeGpuLibraries::two_healthy_gpus();
  gpus.nvml->gpus.pop_back();
  gpus.nvml->device_count = 1;
  auto missing = of(check(tree, &gpus), "gpu_count");
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].status, HealthStatus::Fail);
  EXPECT_EQ(missing[0].device, "GPU 0000:2a:00.0");

  gpus.nvml = FakeGpuLibraries::two_healthy_gpus();
  gpus.nvml->gpus[1] = GpuHealthReading{1, "", "", "", "NVML cannot open it: GPU is lost (NVML error 15)"};
  auto lost = of(check(tree, &gpus), "gpu_count");
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_NE(lost[0].observed.find("GPU is lost"), std::string::npos);

  HealthExpectations expect;
  expect.gpus_per_node = 8;
  auto counted = of(check(tree, &gpus, expect), "gpu_count");
  EXPECT_EQ(counted.at(0).expected_from, "expect.gpus_per_node");
}

TEST(HealthGpus, WithoutNvmlGpusOnTheBusAreUnknownAndNoGpuIsNothingToCheck) {
  NodeTree tree;
  tree.healthy_gpu_node();
  FakeGpuLibraries gpus;  // NVML does not load
  auto unknown = of(check(tree, &gpus), "gpu");
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0].status, HealthStatus::Unknown);
  EXPECT_NE(unknown[0].observed.find("2 NVIDIA GPUs on the PCI bus"), std::string::npos);

  NodeTree cpu_node;
  cpu_node.pci("0000:00:03.0", "0x020000", "0x1af4", nullptr);
  EXPECT_EQ(of(check(cpu_node, &gpus), "gpu").at(0).status, HealthStatus::Absent);

  gpus.nvml = FakeGpuLibraries::two_healthy_gpus();  // NVML answers, but not everything
  gpus.nvml->gpus[0].ecc_enabled.reset();
  auto partly = of(check(tree, &gpus), "gpu");
  ASSERT_EQ(partly.size(), 1u);
  EXPECT_EQ(partly[0].status, HealthStatus::Unknown);
  EXPECT_NE(partly[0].observed.find("GPU0"), std::string::npos);
}

// ---- the kernel log ----

TEST(HealthXid, XidsAreFoundMappedToTheirGpuAndJudgedBySeverity) {
  auto xids = find_xids(
      "4,900,1000,-;NVRM: Xid (PCI:0000:2a:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
      "[  12.5] NVRM: Xid (PCI:0000:18:00): 13, pid=99, Graphics Exception\n"
      "6,901,1001,-;something else\n");
  ASSERT_EQ(xids.size(), 2u);
  EXPECT_EQ(xids[0].bus_id, "0000:2a:00.0");
  EXPECT_EQ(xids[0].xid, 79);
  EXPECT_EQ(xids[1].xid, 13);
  EXPECT_TRUE(xid_is_fatal(79, ""));
  EXPECT_FALSE(xid_is_fatal(13, ""));
  EXPECT_FALSE(xid_is_fatal(63, "Row Remapper: New row marked for remapping"));
  EXPECT_TRUE(xid_is_fatal(63, "Row Remapper: row remapping failed"));

  NodeTree tree;
  tree.healthy_gpu_node();
  tree.kernel_log("4,900,1000,-;NVRM: Xid (PCI:0000:2a:00): 79, pid=1234, GPU has fallen off the bus.\n"
                  "4,901,1001,-;NVRM: Xid (PCI:0000:2a:00): 79, pid=1234, GPU has fallen off the bus.\n"
                  "4,902,1002,-;NVRM: Xid (PCI:0000:18:00): 13, pid=99, Graphics Exception");
  auto found = of(check(tree, nullptr), "xid");
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].device, "GPU0 0000:18:00.0");
  EXPECT_EQ(found[0].status, HealthStatus::Warn);
  EXPECT_EQ(found[1].device, "GPU1 0000:2a:00.0");
  EXPECT_EQ(found[1].status, HealthStatus::Fail);
  EXPECT_NE(found[1].observed.find("Xid 79 (2 times)"), std::string::npos);
}

TEST(HealthXid, AKernelLogThatCannotBeReadIsUnknownNeverAPass) {
  NodeTree tree;
  tree.healthy_gpu_node();
  EXPECT_EQ(of(check(tree, nullptr), "xid").at(0).status, HealthStatus::Pass);
  std::filesystem::remove(tree.root() + "/dev/kmsg");
  auto xid = of(check(tree, nullptr), "xid");
  ASSERT_EQ(xid.size(), 1u);
  EXPECT_EQ(xid[0].status, HealthStatus::Unknown);
  EXPECT_NE(xid[0].observed.find("dev/kmsg"), std::string::npos);
}

// ---- software, and the node unlike the others ----

TEST(HealthSoftware, TheNodesVersionsAreReadAndTheExpectedDriverEnforced) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.write("etc/libibverbs.d/mlx5.driver", "driver mlx5");
  FakeGpuLibraries gpus;
  gpus.nvml = FakeGpuLibraries::two_healthy_gpus();
  auto h = check(tree, &gpus);
  EXPECT_EQ(h.software.nvidia_driver, "550.54.15");
  EXPECT_EQ(h.software.cuda_driver, "12.4");
  EXPECT_EQ(h.software.nccl, "2.21.5");
  EXPECT_EQ(h.software.kernel, "6.1.0-test-amd64");
  EXPECT_EQ(h.software.rdma_providers, "mlx5");
  EXPECT_EQ(h.software.nvidia_gpus, 2);
  EXPECT_EQ(h.software.ib_rates, "1 x 400 Gb/sec");
  HealthExpectations expect;
  expect.driver_version = "535.104.05";
  auto software = of(check(tree, &gpus, expect), "software");
  ASSERT_EQ(software.size(), 2u);
  EXPECT_EQ(software[0].status, HealthStatus::Fail);
  EXPECT_EQ(software[0].expected_from, "expect.driver_version");
}

TEST(HealthSoftware, TheOddNodeIsNamedBesideTheMajoritysValue) {
  NodeSoftware usual;
  usual.nvidia_driver = "550.54.15";
  usual.nvidia_gpus = 8;
  usual.kernel = "6.1.0";
  NodeSoftware old_driver = usual, missing_gpu = usual;
  old_driver.nvidia_driver = "535.104.05";
  missing_gpu.nvidia_gpus = 7;
  auto d = differences_across_nodes({usual, old_driver, usual, missing_gpu});
  EXPECT_TRUE(d[0].empty());
  ASSERT_EQ(d[1].size(), 1u);
  EXPECT_EQ(d[1][0].status, HealthStatus::Warn);
  EXPECT_EQ(d[1][0].observed, "NVIDIA driver 535.104.05");
  EXPECT_EQ(d[1][0].expected, "550.54.15");
  ASSERT_EQ(d[3].size(), 1u);
  EXPECT_EQ(d[3][0].status, HealthStatus::Fail);
  // Two nodes that differ: neither is the odd one.
  EXPECT_TRUE(differences_across_nodes({usual, old_driver})[1].empty());
}

// ---- the report between agent and head ----

TEST(HealthReport, ARoundTripKeepsEveryFieldAndAnOversizedReportIsRefused) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.write("sys/devices/pci0000:00/0000:29:00.0/0000:2a:00.0/current_link_width", "8");
  NodeHealth h = check(tree, nullptr);
  NodeHealth back = node_health_from_json(to_json(h));
  ASSERT_EQ(back.findings.size(), h.findings.size());
  for (size_t i = 0; i < h.findings.size(); ++i) EXPECT_EQ(back.findings[i].summary(), h.findings[i].summary());
  EXPECT_EQ(back.counters.size(), h.counters.size());
  EXPECT_EQ(back.software.kernel, h.software.kernel);

  std::string huge = R"({"findings":[)";
  for (int i = 0; i < 5000; ++i) huge += std::string(i ? "," : "") + R"({"check":"x","status":"pass"})";
  huge += R"(],"counters":[],"software":{}})";
  EXPECT_THROW(node_health_from_json(huge), Error);
  EXPECT_THROW(node_health_from_json(R"({"findings":[{"status":"sick"}],"counters":[],"software":{}})"), Error);

  HealthExpectations e;
  e.pcie_gen = 5;
  e.driver_version = "550.54.15";
  HealthExpectations e2 = expectations_from_request(health_request_json(e));
  EXPECT_EQ(e2.pcie_gen, 5);
  EXPECT_EQ(e2.driver_version, "550.54.15");
  EXPECT_FALSE(e2.pcie_width);
}

}  // namespace
}  // namespace muster
