// What the kernel already knows of a node's PCI devices, read from sysfs attribute files
// (class, vendor, numa_node), which it keeps in memory: no config-space read, unlike hwloc's
// PCI walk. Enough to tell whether a node has a GPU and which NICs it has.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "topology/topology.h"

namespace muster {

// The first line of a small file the kernel or the system keeps (a sysfs attribute,
// /etc/machine-id), without its newline; empty when it cannot be read.
std::string first_line_of(const std::string& path);

// The vendor name when a PCI device of this class (class and subclass, as 0x0302), vendor
// and device id is a GPU muster places ranks on, else nullptr: never a BMC's or an emulated
// display. The device id tells AMD's GPUs from the old ATI chips on BMCs (the ES1000); `bus`
// tells Intel's integrated graphics (bus 0) from its discrete parts. The one rule, for hwloc's
// objects and sysfs alike.
const char* gpu_vendor_of(unsigned class_id, std::uint16_t vendor_id, std::uint16_t device_id,
                          unsigned bus);

struct SysfsPciDevice {
  std::string bus_id;  // "0000:03:00.0"
  unsigned class_id = 0;
  std::uint16_t vendor_id = 0, device_id = 0;
};

// The devices under SYS/bus/pci/devices; nullopt when that directory cannot be listed
// (no sysfs in a container), which tells nothing either way.
std::optional<std::vector<SysfsPciDevice>> sysfs_pci_devices(const std::string& sys = "/sys");

bool any_gpu(const std::vector<SysfsPciDevice>& devices);

// Whether SYS/class has network devices that hwloc finds but sysfs_nics does not name the
// way hwloc does (BXI and Slingshot's CXI): then only hwloc's walk tells the NICs.
bool has_fabric_classes_beyond_net(const std::string& sys = "/sys");

// The PCI devices behind SYS/class/net and SYS/class/infiniband, one Nic per device (a
// two-port card is one NIC with two interfaces), as hwloc would group them: virtual
// interfaces (lo, veth, bridges) have no device and are not NICs. Sorted by bus id; the
// location has the bus id, NUMA node and local CPUs, not the PCI path.
std::vector<Nic> sysfs_nics(const std::string& sys = "/sys");

}  // namespace muster
