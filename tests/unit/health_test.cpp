// The health checks, each on fixture trees in the kernel's own formats and a recording fake
// of the GPU libraries: pass, fail and unknown for every check, and the comparisons across
// nodes the head makes.
#include <algorithm>
#include <thread>
#include <future>
#include <unistd.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <condition_variable>
#include <mutex>

#include <gtest/gtest.h>

#include <climits>

#include "launcher/job/health_check.h"
#include "launcher/json_fields.h"
#include "launcher/remote/health_report.h"
#include "tests/support/health_findings.h"
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

using testing::of;

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
  // 2 GPUs and 1 HCA: the port just above each shows that device's own link, judged once.
  EXPECT_EQ(pcie[0].values.at("pcie_links_checked"), 3);
}

TEST(HealthPcie, AGpuTrainedAtX8FailsNamingItAndBothWidths) {
  NodeTree tree;
  tree.healthy_gpu_node();
  // As the kernel shows it: the device and the port above it report the one link.
  tree.write("sys/devices/pci0000:00/0000:29:00.0/0000:2a:00.0/current_link_width", "8");
  tree.write("sys/devices/pci0000:00/0000:29:00.0/current_link_width", "8");
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

  // A GPU that NVML says is at work keeps its link at full speed: slow, it fails, named
  // with its model.
  FakeGpuLibraries gpus;
  gpus.nvml = FakeGpuLibraries::two_healthy_gpus();
  gpus.nvml->gpus[0].throttle_reasons = 0;
  auto busy = of(check(tree, &gpus), "pcie_link");
  ASSERT_EQ(busy.size(), 2u);
  EXPECT_EQ(busy[0].device, "GPU0 0000:18:00.0 NVIDIA H100 80GB HBM3");
  EXPECT_EQ(busy[0].status, HealthStatus::Fail);
}

TEST(HealthPcie, AnIdleGpuInASlotThatCannotReachTheExpectedGenerationFails) {
  NodeTree tree;
  tree.healthy_gpu_node();
  const std::string gpu = "sys/devices/pci0000:00/0000:17:00.0/0000:18:00.0/";
  tree.write(gpu + "current_link_speed", "2.5 GT/s PCIe");  // idle
  HealthExpectations expect;
  expect.pcie_gen = 5;
  EXPECT_EQ(of(check(tree, nullptr, expect), "pcie_link").at(0).status, HealthStatus::Warn);
  tree.write("sys/devices/pci0000:00/0000:17:00.0/max_link_speed", "16.0 GT/s PCIe");  // a Gen4 slot
  auto pcie = of(check(tree, nullptr, expect), "pcie_link");
  ASSERT_EQ(pcie.size(), 1u);
  EXPECT_EQ(pcie[0].status, HealthStatus::Fail);
  EXPECT_NE(pcie[0].remedy.find("can reach only x16 at 16.0 GT/s (Gen4)"), std::string::npos) << pcie[0].remedy;
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

TEST(HealthPcie, ASnapshotOfPlainDirectoriesIsReadAsTheKernelsTree) {
  // What support can ask for: the files the checks read, copied without their links.
  NodeTree tree;
  const std::string gpu = "sys/bus/pci/devices/0000:18:00.0/";
  tree.write(gpu + "class", "0x030200");
  tree.write(gpu + "vendor", "0x10de");
  tree.write(gpu + "current_link_speed", "32.0 GT/s PCIe");
  tree.write(gpu + "max_link_speed", "32.0 GT/s PCIe");
  tree.write(gpu + "current_link_width", "4");
  tree.write(gpu + "max_link_width", "16");
  auto pcie = of(check(tree, nullptr), "pcie_link");
  ASSERT_EQ(pcie.size(), 1u);
  EXPECT_EQ(pcie[0].status, HealthStatus::Fail);
  EXPECT_EQ(pcie[0].device, "GPU0 0000:18:00.0");
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

// A port down is never silent. It fails where something says it should be up (here the
// cluster file; a record and doctor's peers elsewhere); with nothing to say so, it may be the
// second port of a dual-port card, never cabled, and it warns, naming itself and its states.
TEST(HealthIb, APortDownIsNamedWithItsStatesAndFailsAgainstAnExpectation) {
  NodeTree tree;
  tree.healthy_gpu_node();
  tree.ib_port("mlx5_0", "0000:3b:00.0", 2, "1: DOWN", "2: Polling", "10 Gb/sec (4X SDR)");
  auto ib = of(check(tree, nullptr), "ib_port");
  ASSERT_EQ(ib.size(), 1u);
  EXPECT_EQ(ib[0].status, HealthStatus::Warn);
  EXPECT_EQ(ib[0].device, "mlx5_0 port 2 (0000:3b:00.0)");
  EXPECT_NE(ib[0].observed.find("state 1: DOWN, phys_state 2: Polling"), std::string::npos);
  EXPECT_EQ(ib[0].expected, "4: ACTIVE, 5: LinkUp");
  EXPECT_NE(ib[0].expected_from.find("expect.ib_ports or a record (--record)"), std::string::npos)
      << ib[0].expected_from;

  HealthExpectations two;
  two.ib_ports = 2;
  auto expected = of(check(tree, nullptr, two), "ib_port");
  ASSERT_EQ(expected.size(), 2u);  // the port that makes the count short, first, then the count
  for (const auto& f : expected) EXPECT_EQ(f.status, HealthStatus::Fail) << f.device;
  EXPECT_EQ(expected[0].device, "mlx5_0 port 2 (0000:3b:00.0)");
  EXPECT_EQ(expected[1].observed, "1 active InfiniBand/RoCE port");

  // With as many ports active as the cluster file expects, a port down is one not cabled.
  HealthExpectations expect;
  expect.ib_ports = 1;
  EXPECT_EQ(of(check(tree, nullptr, expect), "ib_port").at(0).status, HealthStatus::Warn);
  // A port disabled (by an administrator, or after it went down) is never silent: a warning
  // that names it with its states, beside the pass of the ports that are up.
  tree.ib_port("mlx5_0", "0000:3b:00.0", 2, "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)");
  const auto disabled = of(check(tree, nullptr), "ib_port");
  ASSERT_EQ(disabled.size(), 1u);
  EXPECT_EQ(disabled[0].status, HealthStatus::Warn);
  EXPECT_EQ(disabled[0].device, "mlx5_0 port 2 (0000:3b:00.0)");
  EXPECT_NE(disabled[0].observed.find("state 1: DOWN, phys_state 3: Disabled"), std::string::npos);
}

// Two HDR HCAs, mlx5_1 gone DOWN and Disabled: the node is not "1 port ACTIVE" and PASS.
TEST(HealthIb, ASecondHcaGoneDownAndDisabledIsNamedNotPassed) {
  NodeTree tree;
  tree.healthy_gpu_node();  // mlx5_0 port 1: InfiniBand, ACTIVE
  tree.ib_port("mlx5_1", "0000:3b:00.0", 1, "1: DOWN", "3: Disabled", "200 Gb/sec (4X HDR)");
  const auto ib = of(check(tree, nullptr), "ib_port");
  ASSERT_EQ(ib.size(), 1u);
  EXPECT_EQ(ib[0].status, HealthStatus::Warn);
  EXPECT_EQ(ib[0].device, "mlx5_1 port 1 (0000:3b:00.0)");
  EXPECT_NE(ib[0].remedy.find("enable it (ibportstate)"), std::string::npos) << ib[0].remedy;
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
  EXPECT_EQ(ib[0].expected_from, "most ports of its kind on this node");

  HealthExpectations expect;
  expect.ib_rate_gbps = 800;
  expect.ib_ports = 4;
  auto strict = of(check(tree, nullptr, expect), "ib_port");
  EXPECT_EQ(strict.size(), 4u);  // each of the three below 800, then too few active ports
  EXPECT_EQ(strict.at(3).expected_from, "expect.ib_ports");
}

TEST(HealthIb, RoceAndInfinibandPortsAreComparedEachWithTheirOwnKind) {
  NodeTree tree;
  tree.healthy_gpu_node();  // mlx5_0 port 1: InfiniBand at 400 Gb/s
  tree.ib_port("mlx5_1", "0000:3b:00.0", 1, "4: ACTIVE", "5: LinkUp", "100 Gb/sec (4X EDR)");
  tree.write("sys/class/infiniband/mlx5_1/ports/1/link_layer", "Ethernet");
  auto ib = of(check(tree, nullptr), "ib_port");
  ASSERT_EQ(ib.size(), 1u);
  EXPECT_EQ(ib[0].status, HealthStatus::Pass) << ib[0].summary();
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
  EXPECT_EQ(clocks[1].status, HealthStatus::Fail);
  EXPECT_NE(clocks[1].observed.find("software thermal slowdown"), std::string::npos);
  auto links = of(h, "gpu_nvlink");
  ASSERT_EQ(links.size(), 1u);
  EXPECT_EQ(links[0].observed, "NVLink 4 of 18 down");
  EXPECT_EQ(h.software.nvlinks, 35);
  EXPECT_EQ(of(h, "gpu_temperature").at(0).status, HealthStatus::Fail);
}

TEST(HealthGpus, AGpuWithoutNvlinkBridgesIsNotBroken) {
  NodeTree tree;
  tree.healthy_gpu_node();
  FakeGpuLibraries gpus;
  gpus.nvml = FakeGpuLibraries::two_healthy_gpus();
  for (auto& g : gpus.nvml->gpus)
    for (auto& l : g.nvlinks) l.active = false;  // PCIe cards: NVML lists links, none up
  auto h = check(tree, &gpus);
  EXPECT_TRUE(of(h, "gpu_nvlink").empty()) << all(h);
  EXPECT_EQ(h.software.nvlinks, 0);  // what doctor compares across the nodes
}

TEST(HealthGpus, AGpuOnTheBusThatNvmlCannotOpenHasFallenOffIt) {
  NodeTree tree;
  tree.healthy_gpu_node();
  FakeGpuLibraries gpus;
  gpus.nvml = FakeGpuLibraries::two_healthy_gpus();
  gpus.nvml->gpus[1] = GpuHealthReading{1, "", "", "", "GPU is lost (NVML error 15)", 15};
  auto lost = of(check(tree, &gpus), "gpu_count");
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].status, HealthStatus::Fail);
  EXPECT_EQ(lost[0].device, "GPU1 0000:2a:00.0");  // the GPU on the bus NVML could not open
  EXPECT_EQ(lost[0].observed, "NVML cannot open it: GPU is lost (NVML error 15)");

  // Held by a cgroup for another job: not this process's to judge.
  gpus.nvml->gpus[1] = GpuHealthReading{1, "", "", "", "no permission (NVML error 4)", kNvmlNoPermission};
  EXPECT_EQ(of(check(tree, &gpus), "gpu_count").at(0).status, HealthStatus::Absent);

  // Not even counted (a container shows NVML its own GPUs): unknown, not a failure.
  gpus.nvml->gpus.pop_back();
  gpus.nvml->device_count = 1;
  auto missing = of(check(tree, &gpus), "gpu_count");
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].status, HealthStatus::Unknown);
  EXPECT_EQ(missing[0].device, "GPU 0000:2a:00.0");
  gpus.nvml = FakeGpuLibraries::two_healthy_gpus();

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

// A library call that never returns, until the test lets it.
class HangingGpuLibraries : public FakeGpuLibraries {
 public:
  std::optional<NvmlHealthReading> read_nvml(std::string& why) override {
    std::unique_lock lock(mutex);
    released.wait(lock, [&] { return release; });
    return FakeGpuLibraries::read_nvml(why);
  }
  void let_go() {
    std::lock_guard lock(mutex);
    release = true;
    released.notify_all();
  }
  std::mutex mutex;
  std::condition_variable released;
  bool release = false;
};

TEST(HealthGpus, AReadingThatHangsFailsAtTheDeadlineNamingTheCheck) {
  NodeTree tree;
  tree.healthy_gpu_node();
  auto hanging = std::make_shared<HangingGpuLibraries>();
  // 2 s, so that the files' re-check has half a second: at 0.2 s its 50 ms was too short
  // for a loaded CI machine, and it timed out in its turn.
  auto h = check_node_health_within(tree.root(), hanging, {}, std::chrono::seconds(2));
  hanging->let_go();  // the thread left behind ends with the test
  ASSERT_FALSE(h.findings.empty());
  EXPECT_FALSE(h.complete);  // doctor leaves it out of the comparison across nodes
  EXPECT_EQ(h.findings[0].check, "gpu");
  EXPECT_EQ(h.findings[0].status, HealthStatus::Fail);
  EXPECT_NE(h.findings[0].observed.find("did not finish within 2 s: stuck in the gpu check"), std::string::npos)
      << h.findings[0].observed;
  // The node's files are still read: a link gone or an Xid names the GPU that hung.
  EXPECT_EQ(of(h, "pcie_link").at(0).status, HealthStatus::Pass) << all(h);
  EXPECT_EQ(of(h, "xid").at(0).status, HealthStatus::Pass) << all(h);
  // Within the deadline, the checks' own findings.
  auto quick = std::make_shared<FakeGpuLibraries>();
  auto whole = check_node_health_within(tree.root(), quick, {}, std::chrono::seconds(30));
  EXPECT_GT(whole.findings.size(), 3u);
}

// NVML hangs, and so does a read of the node's files (a FIFO where a link's speed should be):
// the re-check of the files has a deadline of its own, a quarter of the first, and both hangs
// are named. Before, the files were read again with no deadline, and this never returned.
TEST(HealthGpus, WhenNvmlHangsTheFilesAreReadAgainUnderADeadlineOfTheirOwn) {
  NodeTree tree;
  tree.healthy_gpu_node();
  const std::string speed = tree.root() + "/sys/devices/pci0000:00/0000:17:00.0/0000:18:00.0/current_link_speed";
  ASSERT_EQ(::unlink(speed.c_str()), 0);
  ASSERT_EQ(::mkfifo(speed.c_str(), 0600), 0);
  auto hanging = std::make_shared<HangingGpuLibraries>();
  auto done = std::make_shared<std::promise<NodeHealth>>();
  auto result = done->get_future();
  std::thread([done, root = tree.root(), hanging] {
    done->set_value(check_node_health_within(root, hanging, {}, std::chrono::milliseconds(400)));
  }).detach();
  const bool returned = result.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  // The readings stay stuck in the FIFO's open until the process ends: let go, they would
  // walk on through the checks while the process exits.
  ASSERT_TRUE(returned) << "the re-check of the files never returned";
  const NodeHealth h = result.get();
  ASSERT_GE(h.findings.size(), 2u) << all(h);
  EXPECT_NE(h.findings[0].observed.find("stuck in the gpu check (NVML did not answer)"), std::string::npos)
      << all(h);
  EXPECT_NE(all(h).find("did not finish within 0.1 s: stuck in the "), std::string::npos) << all(h);
  EXPECT_NE(all(h).find("a read of the node's files did not return"), std::string::npos) << all(h);
  EXPECT_FALSE(h.complete);
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

TEST(HealthXid, ASnapshotsLogIsReadWholeAcrossReads) {
  // A plain file is read in pieces: an Xid line across two of them is still one line.
  NodeTree tree;
  tree.healthy_gpu_node();
  const std::string line = "[ 99.1] NVRM: Xid (PCI:0000:2a:00): 79, pid=1, GPU has fallen off the bus.";
  for (size_t cut = 8192 - 40; cut <= 8192 - 10; cut += 5) {
    tree.kernel_log(std::string(cut - 1, 'x') + "\n" + line);
    auto xid = of(check(tree, nullptr), "xid");
    ASSERT_EQ(xid.size(), 1u) << cut;
    EXPECT_EQ(xid[0].status, HealthStatus::Fail) << cut << ": " << xid[0].summary();
    EXPECT_NE(xid[0].observed.find("Xid 79"), std::string::npos) << cut;
  }
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
  // Without NVML, the driver the kernel loaded says its version in /proc.
  tree.write("proc/driver/nvidia/version",
             "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023");
  EXPECT_EQ(check(tree, nullptr).software.nvidia_driver, "535.104.05");
  EXPECT_EQ(of(check(tree, nullptr, expect), "software").size(), 1u);  // as expected: only the summary
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

  // A report larger than any node's keeps its first findings and says so, rather than
  // turning a sick node into an unknown one.
  std::string huge = R"({"findings":[)";
  for (int i = 0; i < 5000; ++i) huge += std::string(i ? "," : "") + R"({"check":"x","status":"fail"})";
  huge += R"(],"counters":[],"software":{}})";
  NodeHealth kept = node_health_from_json(huge);
  ASSERT_EQ(kept.findings.size(), 4097u);
  EXPECT_EQ(kept.findings[0].status, HealthStatus::Fail);
  EXPECT_EQ(kept.findings.back().observed, "904 more findings left out (the head keeps 4096)");
  EXPECT_THROW(node_health_from_json(R"({"findings":[{"status":"sick"}],"counters":[],"software":{}})"), Error);

  HealthExpectations e;
  e.pcie_gen = 5;
  e.driver_version = "550.54.15";
  HealthExpectations e2 = expectations_from_request(health_request_json(e));
  EXPECT_EQ(e2.pcie_gen, 5);
  EXPECT_EQ(e2.driver_version, "550.54.15");
  EXPECT_FALSE(e2.pcie_width);
  // A GPU model the cluster file wrote in Latin-1 reaches the node as written: it must match
  // the node's own bytes, never a U+FFFD stand-in.
  e.gpu_model = "Tesla \xe9";
  EXPECT_EQ(expectations_from_request(health_request_json(e)).gpu_model, "Tesla \xe9");
  // The GPU stress tests reach the agent with their bars, and only when asked for.
  EXPECT_FALSE(e2.stress.run);
  e.stress.run = true;
  e.stress.peer_ratio = 0.8;
  const HealthExpectations stressed = expectations_from_request(health_request_json(e));
  EXPECT_TRUE(stressed.stress.run);
  EXPECT_DOUBLE_EQ(stressed.stress.peer_ratio, 0.8);
  EXPECT_DOUBLE_EQ(stressed.stress.hardware_ratio, 0.5);
  EXPECT_THROW(expectations_from_request(R"({"op":"health","expect":{},"stress":{"peer_ratio":0.7,)"
                                         R"("hardware_ratio":1.5}})"),
               Error);
}

TEST(HealthReport, AFigureOfAnyFiniteSizeSurvivesAndAnIntegerOutOfRangeIsRefused) {
  // A figure in bytes a second, or a negative one, is data: it does not turn the node's
  // whole report into "not a health report".
  const NodeHealth kept = node_health_from_json(
      R"({"findings":[{"check":"gpu_host_copy","status":"pass","values":{"bytes_per_second":5.3e10,"drift":-4.5}}],)"
      R"("counters":[{"device":"mlx5_0 port 1","name":"symbol_error","value":12}],"software":{"nvidia_gpus":8}})");
  ASSERT_EQ(kept.findings.size(), 1u);
  EXPECT_DOUBLE_EQ(kept.findings[0].values.at("bytes_per_second"), 5.3e10);
  EXPECT_DOUBLE_EQ(kept.findings[0].values.at("drift"), -4.5);
  EXPECT_EQ(kept.counters.at(0).value, 12u);
  EXPECT_EQ(kept.software.nvidia_gpus, 8);
  // Where a value becomes an integer, its range is still checked before the conversion.
  EXPECT_THROW(node_health_from_json(R"({"findings":[],"counters":[],"software":{"nvidia_gpus":1e300}})"), Error);
  EXPECT_THROW(node_health_from_json(R"({"findings":[],"counters":[],"software":{"ib_ports":-1}})"), Error);
  EXPECT_THROW(counters_from_json(R"([{"device":"d","name":"n","value":1e30}])"), Error);
  EXPECT_THROW(counters_from_json(R"([{"device":"d","name":"n","value":-1}])"), Error);
  EXPECT_EQ(json_integer(nlohmann::json::parse("7.0"), 0, 10), 7);
  EXPECT_EQ(json_integer(nlohmann::json::parse("2147483647"), 0, INT_MAX), INT_MAX);
  EXPECT_THROW(json_integer(nlohmann::json::parse("2147483648.0"), 0, INT_MAX), nlohmann::json::exception);
  EXPECT_THROW(json_integer(nlohmann::json::parse("18446744073709551615"), 0L, LONG_MAX), nlohmann::json::exception);
  // Protocols whose integers are read plainly keep refusing such floats as they are parsed.
  EXPECT_THROW(parse_untrusted_json("[2.9e69]"), nlohmann::json::exception);
  EXPECT_NO_THROW(parse_untrusted_json("[2.9e69]", Floats::AnyFinite));
}

}  // namespace
}  // namespace muster
