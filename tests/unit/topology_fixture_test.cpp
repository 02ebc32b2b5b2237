// Topology discovery, path classification and binding on real exports of real machines.
// Every expectation below is derived by reading the XML; the derivation is in the comments.
#include <gtest/gtest.h>
#include <hwloc.h>
#include <nlohmann/json.hpp>

#include "launcher/cluster/hostfile.h"
#include "launcher/cluster/local_gpus.h"
#include "launcher/cluster/rank_plan.h"
#include "launcher/error.h"
#include "launcher/remote/launch_spec.h"
#include "tests/support/build_paths.h"
#include "topology/binding.h"
#include "topology/cpu_list.h"
#include "topology/nvml.h"
#include "topology/topology_source.h"

using muster::testing::source_path;

namespace muster {
namespace {

Topology load_fixture(const std::string& name) {
  return HwlocTopologySource(source_path("/tests/fixtures/hwloc/") + name).load();
}

std::string path(const Topology& t, int a, int b) { return gpu_to_gpu(t, a, b).str(); }
std::string pci(const Topology& t, int a, int b) {
  return PathCell{classify_pci_path(t.gpus[size_t(a)].location, t.gpus[size_t(b)].location)}.str();
}

// --- the 2-socket server ----------------------------------------------------------------
// Host bridge 0000:[00-05] hangs off package 0 (NUMA 0, PUs 0-7,16-23): root port 00:03.0
// holds NVIDIA 03:00.0; 00:1e.0 holds the Matrox BMC VGA 05:03.0 (102b:0532, not a GPU).
// Host bridge 0000:[80-84] hangs off package 1 (NUMA 1, PUs 8-15,24-31): root port 80:01.0
// holds Ethernet 81:00.0 (eth0) and 81:00.1 (eth1); 80:02.0 holds NVIDIA 83:00.0; 80:03.0
// holds NVIDIA 84:00.0, AMD 84:00.1 (1002:6798, VGA) and the Mellanox HCA 04:00.0
// (ib0, mlx5_0).

TEST(TopologyTwoSocket, FindsTheGpusButNotTheBmcDisplay) {
  Topology t = load_fixture("2socket-gpus-ib-eth.xml");
  EXPECT_FALSE(t.is_this_machine);
  EXPECT_EQ(t.packages, 2);
  EXPECT_EQ(t.cores, 16);
  EXPECT_EQ(t.pus, 32);
  ASSERT_EQ(t.numa_nodes.size(), 2u);
  EXPECT_EQ(format_cpu_list(t.numa_nodes[1].cpus), "8-15,24-31");
  ASSERT_EQ(t.gpus.size(), 4u);
  const char* bus_ids[] = {"0000:03:00.0", "0000:83:00.0", "0000:84:00.0", "0000:84:00.1"};
  const char* vendors[] = {"NVIDIA", "NVIDIA", "NVIDIA", "AMD"};
  const int numa[] = {0, 1, 1, 1};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(t.gpus[size_t(i)].index, i);
    EXPECT_EQ(t.gpus[size_t(i)].location.bus_id, bus_ids[i]);
    EXPECT_EQ(t.gpus[size_t(i)].vendor, vendors[i]);
    EXPECT_EQ(t.gpus[size_t(i)].location.numa, numa[i]);
  }
  EXPECT_EQ(format_cpu_list(t.gpus[0].location.cpus), "0-7,16-23");
  EXPECT_EQ(format_cpu_list(t.gpus[3].location.cpus), "8-15,24-31");
  EXPECT_FALSE(t.nvlinks.has_value());
}

TEST(TopologyTwoSocket, FindsTheNicsWithTheirInterfaces) {
  Topology t = load_fixture("2socket-gpus-ib-eth.xml");
  ASSERT_EQ(t.nics.size(), 3u);
  EXPECT_EQ(t.nics[0].name, "mlx5_0");
  EXPECT_EQ(t.nics[0].interfaces, std::vector<std::string>{"ib0"});
  EXPECT_EQ(t.nics[0].location.bus_id, "0000:04:00.0");
  EXPECT_EQ(t.nics[1].name, "eth0");
  EXPECT_EQ(t.nics[2].name, "eth1");
  for (const auto& nic : t.nics) EXPECT_EQ(nic.location.numa, 1);
}

TEST(TopologyTwoSocket, PathMatrixFollowsTheBridges) {
  Topology t = load_fixture("2socket-gpus-ib-eth.xml");
  EXPECT_EQ(path(t, 0, 0), "X");
  EXPECT_EQ(path(t, 0, 1), "SYS");  // package 0 to package 1
  EXPECT_EQ(path(t, 1, 2), "PHB");  // root ports 80:02.0 and 80:03.0 meet at the host bridge
  EXPECT_EQ(path(t, 2, 3), "PIX");  // both below root port 80:03.0
  EXPECT_EQ(gpu_to_nic(t, 2, 0).str(), "PIX");  // the HCA shares 80:03.0 with GPU2
  EXPECT_EQ(gpu_to_nic(t, 1, 1).str(), "PHB");
  EXPECT_EQ(gpu_to_nic(t, 0, 0).str(), "SYS");
  EXPECT_EQ(nearest_nics(t, 2), std::vector<int>{0});
  EXPECT_EQ(nearest_nics(t, 0).size(), 3u);  // all equally far (SYS) and equally fast
}

// What an agent's hello carries for reports to draw: the same cells, in nvidia-smi's words,
// each GPU's row to every GPU then every NIC, and its nearest NICs by name; it survives the
// trip to the head.
TEST(TopologyTwoSocket, ThePathMatrixAHelloCarriesIsTheSameCellsByName) {
  Topology t = load_fixture("2socket-gpus-ib-eth.xml");
  const PathMatrix m = path_matrix(t);
  ASSERT_EQ(m.devices, (std::vector<std::string>{"GPU0", "GPU1", "GPU2", "GPU3", "mlx5_0", "eth0", "eth1"}));
  ASSERT_EQ(m.rows.size(), 4u);
  EXPECT_EQ(m.rows[0][0], "X");
  EXPECT_EQ(m.rows[0][1], "SYS");
  EXPECT_EQ(m.rows[2][3], "PIX");
  EXPECT_EQ(m.rows[2][4], "PIX");  // GPU2 to mlx5_0
  EXPECT_EQ(m.nearest[2], std::vector<std::string>{"mlx5_0"});
  NodeHello hello;
  hello.paths = m;
  EXPECT_EQ(node_hello_from_json(to_json(hello)).paths, m);
  // A row of another width, or a word too long, is a malformed hello.
  auto j = nlohmann::json::parse(to_json(hello));
  j["paths"]["rows"][1].push_back("SYS");
  EXPECT_THROW(node_hello_from_json(j.dump()), Error);
  j = nlohmann::json::parse(to_json(hello));
  j["paths"]["rows"][1][0] = std::string(100, 'X');
  EXPECT_THROW(node_hello_from_json(j.dump()), Error);
}

TEST(TopologyTwoSocket, CoreBindingSplitsEachGpusCoresAmongItsRanks) {
  Topology t = load_fixture("2socket-gpus-ib-eth.xml");
  // GPU0 alone on NUMA 0 gets its 8 cores; GPUs 1-3 share NUMA 1's 8 cores as 3+3+2,
  // each core with both of its hyperthreads (core k of package 1 is PUs 8+k and 24+k).
  auto b = plan_bindings(t, {0, 1, 2, 3}, BindPolicy::Core);
  EXPECT_EQ(format_cpu_list(b[0].cpus), "0-7,16-23");
  EXPECT_EQ(format_cpu_list(b[1].cpus), "8-10,24-26");
  EXPECT_EQ(format_cpu_list(b[2].cpus), "11-13,27-29");
  EXPECT_EQ(format_cpu_list(b[3].cpus), "14-15,30-31");
  EXPECT_EQ(b[3].numa, 1);
  auto numa = plan_bindings(t, {1, 2}, BindPolicy::Numa);
  EXPECT_EQ(format_cpu_list(numa[0].cpus), "8-15,24-31");
  EXPECT_EQ(numa[0].cpus, numa[1].cpus);
  EXPECT_TRUE(plan_bindings(t, {0}, BindPolicy::None)[0].cpus.empty());
}

TEST(TopologyTwoSocket, RanksWithoutGpusSpreadOverNumaNodes) {
  Topology t = load_fixture("2socket-gpus-ib-eth.xml");
  auto b = plan_bindings(t, {std::nullopt, std::nullopt, std::nullopt, std::nullopt},
                         BindPolicy::Core);
  EXPECT_EQ(b[0].numa, 0);
  EXPECT_EQ(b[1].numa, 0);
  EXPECT_EQ(b[2].numa, 1);
  EXPECT_EQ(b[3].numa, 1);
  EXPECT_EQ(format_cpu_list(b[0].cpus), "0-3,16-19");
  EXPECT_EQ(format_cpu_list(b[1].cpus), "4-7,20-23");
  EXPECT_EQ(format_cpu_list(b[2].cpus), "8-11,24-27");
  EXPECT_EQ(format_cpu_list(b[3].cpus), "12-15,28-31");
}

// --- the DGX-2 ----------------------------------------------------------------------------
// Host bridge 0000:[2b-3b] (package 0): root port 2b:00.0 (Intel) -> PLX upstream port
// 2c:00.0 -> downstream ports 2d:04.0 and 2d:0c.0, each -> a second PLX switch (32:00.0 and
// 37:00.0) whose two downstream ports hold one GPU each: 34:00.0 and 36:00.0 under switch
// 32:00.0, 39:00.0 and 3b:00.0 under 37:00.0. Host bridge 0000:[4e-67] (also package 0)
// holds 57, 59, 5c, 5e the same way; package 1 holds b7 ... e7. Each GPU has six 25 GB/s
// links into NVSwitches in the NVLinkBandwidth matrix.

TEST(TopologyDgx2, SixteenGpusAndNoNvswitchCountedAsGpu) {
  Topology t = load_fixture("nvidia-dgx2.xml");
  ASSERT_EQ(t.gpus.size(), 16u);
  EXPECT_TRUE(t.nics.empty());
  EXPECT_EQ(t.gpus[0].location.bus_id, "0000:34:00.0");
  EXPECT_EQ(t.gpus[15].location.bus_id, "0000:e7:00.0");
  EXPECT_EQ(t.gpus[0].model, "Tesla V100-SXM3-32GB-H");
  EXPECT_EQ(t.gpus[0].uuid, "GPU-d3977428-7a30-086b-2e20-5c1eeed647c6");
  for (int i = 0; i < 16; ++i) EXPECT_EQ(t.gpus[size_t(i)].location.numa, i < 8 ? 0 : 1) << i;
}

TEST(TopologyDgx2, PcieSwitchesCountOnceAsNcclCountsThem) {
  Topology t = load_fixture("nvidia-dgx2.xml");
  EXPECT_EQ(pci(t, 0, 1), "PIX");   // two GPUs under one switch (32:00.0)
  EXPECT_EQ(pci(t, 0, 2), "PXB");   // different switches below the common switch 2c:00.0
  EXPECT_EQ(pci(t, 0, 4), "NODE");  // different host bridges of package 0
  EXPECT_EQ(pci(t, 0, 8), "SYS");   // across packages
}

TEST(TopologyDgx2, NvlinkThroughNvswitchesIsSixLinksEverywhere) {
  Topology t = load_fixture("nvidia-dgx2.xml");
  ASSERT_TRUE(t.nvlinks.has_value());
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) EXPECT_EQ(path(t, i, j), i == j ? "X" : "NV6") << i << "," << j;
}

TEST(TopologyDgx2, MoreRanksThanCoresShareCoresRoundRobin) {
  Topology t = load_fixture("nvidia-dgx2.xml");
  std::vector<std::optional<int>> gpus;
  for (int i = 0; i < 16; ++i) gpus.push_back(i);
  auto b = plan_bindings(t, gpus, BindPolicy::Core);
  // Package 0 has two single-PU cores (PUs 0 and 1) for GPUs 0-7; package 1 PUs 24, 25.
  EXPECT_EQ(b[0].cpus, std::vector<int>{0});
  EXPECT_EQ(b[1].cpus, std::vector<int>{1});
  EXPECT_EQ(b[2].cpus, std::vector<int>{0});
  EXPECT_EQ(b[8].cpus, std::vector<int>{24});
  EXPECT_EQ(b[9].cpus, std::vector<int>{25});
}

// --- NVLink to CPUs: a POWER8 "Minsky"-shaped board ------------------------------------------
// tests/fixtures/hwloc/power8-nvlink-to-cpu.xml, written for this test in the shape of an IBM
// S822LC for HPC: two packages, each with one NUMA node and four SMT-2 cores numbered as POWER
// numbers them (0-1,8-9,16-17,24-25 and 32-33,...,56-57), and two Tesla P100 SXM2 GPUs each
// behind a host bridge of its own: 0002:01:00.0 and 0003:01:00.0 on package 0, 000a:01:00.0
// and 000b:01:00.0 on package 1. NVLink 1 (20 GB/s per link): each GPU has two links to the
// other GPU of its package and two to its package's CPU. In the NVLinkBandwidth matrix the
// CPUs appear as the Package objects, with 40000 MB/s to their GPUs.
// nvidia-smi topo -m on such a machine shows NV2 within a package and SYS across: the links
// to the CPUs join no GPU to another.

TEST(TopologyPower8, NvlinkToACpuJoinsNoGpus) {
  Topology t = load_fixture("power8-nvlink-to-cpu.xml");
  ASSERT_EQ(t.gpus.size(), 4u);
  EXPECT_EQ(t.gpus[2].location.bus_id, "000a:01:00.0");
  EXPECT_EQ(path(t, 0, 1), "NV2");
  EXPECT_EQ(path(t, 2, 3), "NV2");
  for (auto [a, b] : {std::pair{0, 2}, {0, 3}, {1, 2}, {1, 3}})
    EXPECT_EQ(path(t, a, b), "SYS") << a << "," << b;  // not NV2: a CPU is not an NVSwitch
  ASSERT_EQ(t.cpu_nvlinks.size(), 4u);
  for (int g = 0; g < 4; ++g) {
    EXPECT_EQ(t.cpu_nvlinks[size_t(g)].gpu, g);
    EXPECT_EQ(t.cpu_nvlinks[size_t(g)].package, g < 2 ? 0 : 1);
    EXPECT_EQ(t.cpu_nvlinks[size_t(g)].links, 2);
  }
  EXPECT_EQ(format_cpu_list(t.gpus[0].location.cpus), "0-1,8-9,16-17,24-25");
}

TEST(TopologyDgx2, NvswitchesAreNotCpus) {
  EXPECT_TRUE(load_fixture("nvidia-dgx2.xml").cpu_nvlinks.empty());
}

// --- a 96-core server whose only display is its BMC's ---------------------------------------
// tests/fixtures/hwloc/96em64t-4n4d3ca2co-pci.xml, an IBM x3950 M2: 16 six-core packages in 4
// NUMA nodes (CPUs 0-23, 24-47, 48-71, 72-95). Each node's I/O holds two Broadcom BCM5709
// Ethernet ports (eth0 ... eth7) and a SAS controller; node 0's also the ATI ES1000 at 01:00.0
// (1002:515e, class 0300 VGA; hwloc names it GPU "card0"), the console display the board wires
// to its management controller. No compute stack runs on it: the machine has no GPU.

TEST(TopologyX3950, TheBmcsEs1000IsNoGpu) {
  Topology t = load_fixture("96em64t-4n4d3ca2co-pci.xml");
  EXPECT_EQ(t.packages, 16);
  EXPECT_EQ(t.cores, 96);
  EXPECT_EQ(t.pus, 96);
  ASSERT_EQ(t.numa_nodes.size(), 4u);
  EXPECT_EQ(format_cpu_list(t.numa_nodes[3].cpus), "72-95");
  EXPECT_TRUE(t.gpus.empty()) << t.gpus.front().location.bus_id << " " << t.gpus.front().model;
  ASSERT_EQ(t.nics.size(), 8u);
  EXPECT_EQ(t.nics[0].name, "eth0");
  EXPECT_EQ(t.nics[0].location.numa, 0);
}

TEST(TopologyX3950, SlotsAutoIsOneCpuRankNotARankOnTheBmcsDisplay) {
  HwlocTopologySource source(
      source_path("/tests/fixtures/hwloc/96em64t-4n4d3ca2co-pci.xml"));
  ClusterSpec cluster = this_machine_cluster();
  ASSERT_TRUE(learn_local_gpus(cluster, source).has_value());
  EXPECT_EQ(cluster.nodes[0].gpu_count, 0);
  RankPlan plan = make_rank_plan(cluster, std::nullopt, MapBy::Slot);
  ASSERT_EQ(plan.world_size(), 1);
  EXPECT_FALSE(plan.ranks[0].gpu.has_value()) << "rank 0 on GPU " << *plan.ranks[0].gpu;
}

// What an agent lends PMIx's server: hwloc's own topology of the load, alive for as long as
// anyone holds it, the source gone or not.
TEST(TopologyX3950, TheHwlocTopologyOfTheLoadOutlivesItsSourceForWhoeverHoldsIt) {
  std::shared_ptr<void> kept;
  int pus = 0;
  {
    HwlocTopologySource source(
        source_path("/tests/fixtures/hwloc/96em64t-4n4d3ca2co-pci.xml"));
    EXPECT_EQ(source.hwloc_topology(), nullptr);  // nothing discovered yet
    pus = source.load().pus;
    kept = source.hwloc_topology();
  }
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(pus, 96);
  EXPECT_EQ(hwloc_get_nbobjs_by_type(static_cast<hwloc_topology_t>(kept.get()), HWLOC_OBJ_PU), pus);
}

// --- bad input ----------------------------------------------------------------------------

TEST(TopologyInput, MissingOrNonHwlocFilesAreOneClearConfigError) {
  const std::string not_xml = source_path("/tests/fixtures/hwloc/README.md");
  struct Case { std::string path, message; } cases[] = {
      {"/nonexistent/topo.xml", "/nonexistent/topo.xml: cannot read the topology file: No such "
                                "file or directory"},
      {not_xml, not_xml + ": not an hwloc XML topology"},
      {"/", "/: not an hwloc XML topology"},
  };
  for (const auto& c : cases) {
    try {
      HwlocTopologySource(c.path).load();
      ADD_FAILURE() << c.path;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Config);
      EXPECT_EQ(std::string(e.what()).rfind(c.message, 0), 0u) << e.what();
    }
  }
}

TEST(Nvml, BusIdsAreNormalisedToHwlocsForm) {
  EXPECT_EQ(normalise_bus_id("00000000:3B:00.0"), "0000:3b:00.0");
  EXPECT_EQ(normalise_bus_id("0000:84:00.1"), "0000:84:00.1");
}

TEST(Nvml, WithoutTheLibraryTheAnswerIsAReasonNotAFailure) {
  std::string why;
  auto facts = query_nvml({"0000:03:00.0"}, why);
  if (facts) GTEST_SKIP() << "this machine has NVML; the missing-library path cannot be seen";
  EXPECT_NE(why.find("libnvidia-ml.so.1"), std::string::npos) << why;
}

}  // namespace
}  // namespace muster
