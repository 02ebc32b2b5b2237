// A node's PCI devices and NICs as sysfs tells them, on made-up sysfs trees (files and
// symlinks laid out as the kernel does) and on this machine against hwloc's PCI walk.
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/support/build_paths.h"
#include "topology/line_rate.h"
#include "topology/sysfs_pci.h"
#include "topology/topology_source.h"

using muster::testing::source_path;

namespace muster {
namespace {

namespace fs = std::filesystem;

class FakeSysfs {
 public:
  FakeSysfs() {
    char pattern[] = "/tmp/muster-sysfs-XXXXXX";
    root_ = mkdtemp(pattern);
  }
  ~FakeSysfs() { fs::remove_all(root_); }
  const std::string& root() const { return root_; }

  // A PCI function under devices/pci0000:00, listed in bus/pci/devices as the kernel does.
  fs::path device(const std::string& bus_id, const std::string& cls, const std::string& vendor,
                  const std::string& numa = "0", const std::string& cpus = "0-3") {
    const fs::path dir = fs::path(root_) / "devices/pci0000:00" / bus_id;
    fs::create_directories(dir);
    write(dir / "class", cls);
    write(dir / "vendor", vendor);
    write(dir / "device", "0x1234");
    write(dir / "numa_node", numa);
    write(dir / "local_cpulist", cpus);
    fs::create_directories(fs::path(root_) / "bus/pci/devices");
    fs::create_symlink(dir, fs::path(root_) / "bus/pci/devices" / bus_id);
    return dir;
  }
  // class/CLS/NAME, whose device link leads to `device` (absent: a virtual interface).
  void class_entry(const std::string& cls, const std::string& name, std::optional<fs::path> device) {
    const fs::path dir = fs::path(root_) / "class" / cls / name;
    fs::create_directories(dir);
    if (device) fs::create_symlink(*device, dir / "device");
  }

  // A file under the root, its directories made: an attribute, as the kernel shows it.
  void file(const std::string& path, const std::string& text) {
    fs::create_directories((fs::path(root_) / path).parent_path());
    write(fs::path(root_) / path, text);
  }

 private:
  static void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text << "\n"; }
  std::string root_;
};

TEST(SysfsPci, TellsGpusByClassVendorAndBusAsForHwlocsObjects) {
  // Display controllers of the GPU vendors; Intel's only off bus 0 (bus 0: integrated).
  EXPECT_STREQ(gpu_vendor_of(0x0302, 0x10de, 0x20b0, 0x17), "NVIDIA");  // an A100
  EXPECT_STREQ(gpu_vendor_of(0x0380, 0x1002, 0x740c, 0x83), "AMD");    // an MI250X
  EXPECT_STREQ(gpu_vendor_of(0x0300, 0x8086, 0x56c0, 0x03), "Intel");  // a Flex 170
  EXPECT_EQ(gpu_vendor_of(0x0300, 0x8086, 0x9a49, 0x00), nullptr);
  EXPECT_EQ(gpu_vendor_of(0x0680, 0x10de, 0x1ac2, 0x05), nullptr);  // an NVSwitch
  EXPECT_EQ(gpu_vendor_of(0x0300, 0x1a03, 0x2000, 0x02), nullptr);  // a BMC's ASPEED VGA

  FakeSysfs sys;
  sys.device("0000:00:00.0", "0x060000", "0x8086");
  sys.device("0000:00:02.0", "0x030000", "0x8086");   // integrated graphics
  sys.device("0000:02:00.0", "0x030000", "0x1a03");   // the BMC's display
  sys.device("0000:3b:00.0", "0x020000", "0x15b3");
  auto devices = sysfs_pci_devices(sys.root());
  ASSERT_TRUE(devices);
  ASSERT_EQ(devices->size(), 4u);
  EXPECT_EQ((*devices)[1].bus_id, "0000:00:02.0");
  EXPECT_EQ((*devices)[1].class_id, 0x0300u);  // without the programming interface
  EXPECT_EQ((*devices)[3].vendor_id, 0x15b3);
  EXPECT_FALSE(any_gpu(*devices));

  sys.device("0000:17:00.0", "0x030200", "0x10de");
  devices = sysfs_pci_devices(sys.root());
  ASSERT_TRUE(devices);
  EXPECT_TRUE(any_gpu(*devices));
}

// A board's management display and a hypervisor's emulated one are display controllers too:
// by class alone the ATI ES1000 on a BMC looks like an AMD GPU. None is a slot.
TEST(SysfsPci, ABmcsOrAnEmulatedDisplayIsNoGpuWhateverItsVendor) {
  struct Display { const char *vendor, *device, *what; };
  const Display displays[] = {
      {"0x1002", "0x515e", "ATI ES1000, a BMC's"},
      {"0x1002", "0x5159", "ATI RN50 (Radeon 7000), a BMC's"},
      {"0x1002", "0x4752", "ATI Rage XL, an old server board's"},
      {"0x1a03", "0x2000", "ASPEED AST2500, a BMC's"},
      {"0x102b", "0x0532", "Matrox G200eW, a BMC's"},
      {"0x1013", "0x00b8", "Cirrus GD 5446, QEMU's default"},
      {"0x1234", "0x1111", "QEMU's standard VGA (Bochs)"},
      {"0x15ad", "0x0405", "VMware SVGA II"},
      {"0x1af4", "0x1050", "virtio-gpu"},
      {"0x1b36", "0x0100", "QXL"},
      {"0x1414", "0x5353", "Hyper-V's VGA"},
  };
  for (const Display& d : displays) {
    const auto id = [](const char* hex) { return std::uint16_t(std::stoul(hex, nullptr, 16)); };
    EXPECT_STREQ(gpu_vendor_of(0x0300, id(d.vendor), id(d.device), 0x01), nullptr) << d.what;
    EXPECT_STREQ(gpu_vendor_of(0x0380, id(d.vendor), id(d.device), 0x01), nullptr) << d.what;
    FakeSysfs sys;
    sys.device("0000:01:00.0", "0x030000", d.vendor);
    sys.file("devices/pci0000:00/0000:01:00.0/device", d.device);
    auto devices = sysfs_pci_devices(sys.root());
    ASSERT_TRUE(devices);
    EXPECT_FALSE(any_gpu(*devices)) << d.what;
  }

  // The GPU vendors' compute parts stay GPUs: AMD's Instinct (class 0380, no display at all)
  // and its VGA-class cards from the Radeon HD 7000 on, NVIDIA's whatever their class.
  EXPECT_STREQ(gpu_vendor_of(0x0380, 0x1002, 0x740f, 0x83), "AMD");  // an MI210
  EXPECT_STREQ(gpu_vendor_of(0x0380, 0x1002, 0x738c, 0x83), "AMD");  // an MI100
  EXPECT_STREQ(gpu_vendor_of(0x0300, 0x1002, 0x6798, 0x84), "AMD");  // a Radeon HD 7970
  EXPECT_STREQ(gpu_vendor_of(0x0300, 0x1002, 0x7448, 0x84), "AMD");  // a Radeon Pro W7900
  EXPECT_STREQ(gpu_vendor_of(0x0300, 0x10de, 0x2230, 0x17), "NVIDIA");  // an RTX A6000
  EXPECT_STREQ(gpu_vendor_of(0x0300, 0x10de, 0x1eb8, 0x17), "NVIDIA");  // a T4

  // Beside the BMC's ES1000, an Instinct MI210 is a GPU.
  FakeSysfs sys;
  sys.device("0000:01:00.0", "0x030000", "0x1002");
  sys.file("devices/pci0000:00/0000:01:00.0/device", "0x515e");
  sys.device("0000:83:00.0", "0x038000", "0x1002");
  sys.file("devices/pci0000:00/0000:83:00.0/device", "0x740f");
  auto devices = sysfs_pci_devices(sys.root());
  ASSERT_TRUE(devices);
  EXPECT_TRUE(any_gpu(*devices));
}

TEST(SysfsPci, FabricsItDoesNotNameAsHwlocDoesAreLeftToTheWalk) {
  FakeSysfs sys;
  EXPECT_FALSE(has_fabric_classes_beyond_net(sys.root()));
  sys.class_entry("bxi", "bxi0", std::nullopt);
  EXPECT_TRUE(has_fabric_classes_beyond_net(sys.root()));
}

TEST(SysfsPci, SaysNothingWhenTheDevicesCannotAllBeRead) {
  FakeSysfs sys;
  EXPECT_FALSE(sysfs_pci_devices(sys.root()));  // no bus/pci/devices: a container without sysfs
  sys.device("0000:00:03.0", "0x020000", "0x1af4");
  fs::remove(fs::path(sys.root()) / "devices/pci0000:00/0000:00:03.0/class");
  EXPECT_FALSE(sysfs_pci_devices(sys.root()));  // a device that might be anything
}

TEST(SysfsPci, GroupsInterfacesByTheirPciDeviceAsHwlocDoes) {
  FakeSysfs sys;
  const fs::path dual = sys.device("0000:81:00.0", "0x020000", "0x8086", "1", "8-15");
  const fs::path hca = sys.device("0000:3b:00.0", "0x020700", "0x15b3", "-1", "");
  const fs::path virtio = sys.device("0000:00:03.0", "0x020000", "0x1af4");
  fs::create_directories(virtio / "virtio2");
  sys.class_entry("net", "eth1", dual);
  sys.class_entry("net", "eth0", dual);
  sys.class_entry("net", "ib0", hca);
  sys.class_entry("infiniband", "mlx5_0", hca);
  sys.class_entry("net", "ens3", virtio / "virtio2");  // a virtio NIC: the device is below it
  sys.class_entry("net", "lo", std::nullopt);
  sys.class_entry("net", "veth0", std::nullopt);
  // Behind Intel's VMD the PCI domain has five hex digits.
  sys.class_entry("net", "enp225s0", sys.device("10000:e1:00.0", "0x020000", "0x8086"));

  std::vector<Nic> nics = sysfs_nics(sys.root());
  ASSERT_EQ(nics.size(), 4u);
  EXPECT_EQ(nics[3].location.bus_id, "10000:e1:00.0");
  EXPECT_EQ(nics[0].name, "ens3");
  EXPECT_EQ(nics[0].location.bus_id, "0000:00:03.0");
  EXPECT_EQ(nics[0].vendor_id, 0x1af4);
  EXPECT_EQ(nics[1].name, "mlx5_0");  // the OpenFabrics name, as hwloc's NICs
  EXPECT_EQ(nics[1].interfaces, std::vector<std::string>{"ib0"});
  EXPECT_FALSE(nics[1].location.numa);
  EXPECT_TRUE(nics[1].location.cpus.empty());
  EXPECT_EQ(nics[2].name, "eth0");
  EXPECT_EQ(nics[2].interfaces, (std::vector<std::string>{"eth0", "eth1"}));
  EXPECT_EQ(nics[2].location.numa, 1);
  EXPECT_EQ(nics[2].location.cpus, (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(nics[2].device_id, 0x1234);
}

// On this machine: without a GPU the agent's discovery leaves the PCI walk out and finds
// the same NICs the walk finds; with one (a GPU host) it walks as always.
TEST(SysfsPci, AnAgentOnThisMachineFindsWhatTheWalkFinds) {
  Topology walked = HwlocTopologySource(std::nullopt, PciWalk::Always).load();
  Topology agent = HwlocTopologySource(std::nullopt, PciWalk::OnlyWithGpus).load();
  EXPECT_TRUE(walked.pci_walked);
  auto devices = sysfs_pci_devices();
  if (!devices) GTEST_SKIP() << "this machine's sysfs does not list its PCI devices";
  EXPECT_EQ(agent.pci_walked, any_gpu(*devices));
  EXPECT_EQ(agent.gpus.size(), walked.gpus.size());
  EXPECT_EQ(agent.pus, walked.pus);
  EXPECT_EQ(agent.core_cpus, walked.core_cpus);
  ASSERT_EQ(agent.nics.size(), walked.nics.size());
  for (size_t i = 0; i < agent.nics.size(); ++i) {
    EXPECT_EQ(agent.nics[i].name, walked.nics[i].name);
    EXPECT_EQ(agent.nics[i].interfaces, walked.nics[i].interfaces);
    EXPECT_EQ(agent.nics[i].location.bus_id, walked.nics[i].location.bus_id);
    EXPECT_EQ(agent.nics[i].vendor_id, walked.nics[i].vendor_id);
    EXPECT_EQ(agent.nics[i].device_id, walked.nics[i].device_id);
    EXPECT_EQ(agent.nics[i].location.numa, walked.nics[i].location.numa);
    EXPECT_EQ(agent.nics[i].location.cpus, walked.nics[i].location.cpus);
  }
}

// An export named in hwloc's own variable is what the user asked hwloc for: its GPUs count,
// whatever this machine's sysfs lists.
// An Ethernet port's speed in Mb/s; an IPoIB interface's its HCA port's rate (the port its
// dev_port names, counted from 0); unknown where the kernel says -1 or cannot tell.
TEST(LineRate, ReadsTheSpeedOrTheHcaPortsRateAsTheKernelShowsThem) {
  FakeSysfs sys;
  const fs::path nic = sys.device("0000:81:00.0", "0x020000", "0x8086");
  const fs::path hca = sys.device("0000:3b:00.0", "0x020700", "0x15b3");
  sys.class_entry("net", "eth0", nic);
  sys.file("class/net/eth0/speed", "25000");
  sys.class_entry("net", "eth1", nic);
  sys.file("class/net/eth1/speed", "-1");  // its link is down
  sys.class_entry("net", "veth0", std::nullopt);  // no speed file to read
  sys.file("devices/pci0000:00/0000:3b:00.0/infiniband/mlx5_0/ports/1/rate", "100 Gb/sec (4X EDR)");
  sys.file("devices/pci0000:00/0000:3b:00.0/infiniband/mlx5_0/ports/2/rate", "25 Gb/sec (1X EDR)");
  sys.class_entry("net", "ib0", hca);
  sys.file("class/net/ib0/dev_port", "0");
  sys.file("class/net/ib0/speed", "-1");
  sys.class_entry("net", "ib1", hca);
  sys.file("class/net/ib1/dev_port", "1");
  EXPECT_EQ(interface_line_rate_gbps("eth0", sys.root()), 25.0);
  EXPECT_EQ(interface_line_rate_gbps("eth1", sys.root()), std::nullopt);
  EXPECT_EQ(interface_line_rate_gbps("veth0", sys.root()), std::nullopt);
  EXPECT_EQ(interface_line_rate_gbps("ib0", sys.root()), 100.0);
  EXPECT_EQ(interface_line_rate_gbps("ib1", sys.root()), 25.0);  // trained to 1X of 4X
  EXPECT_EQ(interface_line_rate_gbps("../../etc", sys.root()), std::nullopt);
  EXPECT_EQ(interface_line_rate_gbps("absent0", sys.root()), std::nullopt);
}

TEST(SysfsPci, AnExportNamedToHwlocIsWalkedWhateverThisMachineHas) {
  struct ScopedExport {
    ScopedExport() { setenv("HWLOC_XMLFILE", source_path("/tests/fixtures/hwloc/2socket-gpus-ib-eth.xml").c_str(), 1); }
    ~ScopedExport() { unsetenv("HWLOC_XMLFILE"); }
  };
  Topology t;
  {
    ScopedExport named;
    t = HwlocTopologySource(std::nullopt, PciWalk::OnlyWithGpus).load();
  }
  EXPECT_TRUE(t.pci_walked);
  EXPECT_EQ(t.gpus.size(), 4u);
  EXPECT_EQ(t.nics.size(), 3u);
}

}  // namespace
}  // namespace muster
