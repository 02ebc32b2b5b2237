#include "topology/sysfs_pci.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "launcher/error.h"
#include "topology/cpu_list.h"

namespace muster {

std::string first_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

namespace {

namespace fs = std::filesystem;

// A sysfs number such as "0x10de" or "0x030000"; nullopt when the file is missing or odd.
std::optional<unsigned long> hex_file(const fs::path& path) {
  const std::string text = first_line_of(path);
  if (text.empty()) return std::nullopt;
  try {
    size_t used = 0;
    unsigned long value = std::stoul(text, &used, 16);
    if (used != text.size()) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// "0000:03:00.0": domain (4 hex digits or more: Intel's VMD domains have 5), bus, device
// and function.
bool is_bus_id(const std::string& name) {
  const size_t colon = name.find(':');
  if (colon == std::string::npos || colon < 4 || name.size() != colon + 8) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const bool separator = i == colon || i == colon + 3 || i == colon + 6;
    const char expected = i == colon + 6 ? '.' : ':';
    if (separator ? name[i] != expected : !std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  }
  return true;
}

unsigned bus_of(const std::string& bus_id) {
  unsigned domain = 0, bus = 0;
  return std::sscanf(bus_id.c_str(), "%x:%x", &domain, &bus) == 2 ? bus : 0;
}

// The PCI device a class entry (net/eth0, infiniband/mlx5_0) sits on: the last PCI
// address on the way to its device (a virtio NIC's device is virtio0, below its PCI
// function). Empty for a virtual interface, which has no device.
std::string pci_device_of(const fs::path& class_entry) {
  std::error_code ec;
  const fs::path device = fs::canonical(class_entry / "device", ec);
  if (ec) return "";
  std::string found;
  for (const auto& part : device)
    if (is_bus_id(part.string())) found = part.string();
  return found;
}

// ATI numbered its display chips up to the Radeon X850 (Rage, Radeon R100 to R400: to 2005)
// 0x3000 to 0x5fff, and AMD none of its later GPUs or APUs (0x1xxx, 0x6xxx, 0x7xxx, 0x9xxx). No
// compute stack ever ran on these chips; where one is still found, it is a server board's
// console display, wired to its BMC: the ES1000 (0x515e), the RN50 (a Radeon 7000, 0x5159), the
// Rage XL (0x4752). A second head of such a chip is class 0380 like an Instinct, hence the id.
bool is_old_ati_display(std::uint16_t device_id) { return device_id >= 0x3000 && device_id < 0x6000; }

}  // namespace

// Only NVIDIA, AMD and Intel make display controllers that a compute stack muster sets ranks
// up for (CUDA, ROCm, oneAPI) drives. Any other vendor's, whatever its class, is a BMC's
// (ASPEED, Matrox) or a hypervisor's emulated display (Cirrus, QEMU's Bochs VGA, VMware's SVGA,
// Red Hat's virtio-gpu and QXL, Hyper-V's VGA). Of the three's own, AMD's old ATI chips are BMC
// displays too.
const char* gpu_vendor_of(unsigned class_id, std::uint16_t vendor_id, std::uint16_t device_id,
                          unsigned bus) {
  const bool display = class_id == 0x0300 || class_id == 0x0302 || class_id == 0x0380;
  if (!display) return nullptr;  // NVSwitches (0680) and the like are not GPUs
  if (vendor_id == 0x10de) return "NVIDIA";
  if (vendor_id == 0x1002 && !is_old_ati_display(device_id)) return "AMD";
  // Intel's integrated graphics sit on bus 0; its discrete parts sit behind a bridge.
  if (vendor_id == 0x8086 && bus != 0) return "Intel";
  return nullptr;
}

std::optional<std::vector<SysfsPciDevice>> sysfs_pci_devices(const std::string& sys) {
  std::error_code ec;
  fs::directory_iterator it(fs::path(sys) / "bus/pci/devices", ec);
  if (ec) return std::nullopt;
  std::vector<SysfsPciDevice> out;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const fs::directory_entry& entry = *it;
    SysfsPciDevice d;
    d.bus_id = entry.path().filename().string();
    auto cls = hex_file(entry.path() / "class");
    auto vendor = hex_file(entry.path() / "vendor");
    auto device = hex_file(entry.path() / "device");
    // A device whose class cannot be read might be anything: the caller must look closer.
    if (!cls || !vendor) return std::nullopt;
    d.class_id = unsigned(*cls >> 8);  // the file adds the programming interface
    d.vendor_id = std::uint16_t(*vendor);
    d.device_id = std::uint16_t(device.value_or(0));
    out.push_back(std::move(d));
  }
  // A failed increment leaves the iterator at the end, so a listing cut short is told by
  // `ec` only here; it tells nothing either way (a GPU may be among the devices not seen).
  if (ec) return std::nullopt;
  std::sort(out.begin(), out.end(),
            [](const SysfsPciDevice& a, const SysfsPciDevice& b) { return a.bus_id < b.bus_id; });
  return out;
}

bool any_gpu(const std::vector<SysfsPciDevice>& devices) {
  return std::any_of(devices.begin(), devices.end(), [](const SysfsPciDevice& d) {
    return gpu_vendor_of(d.class_id, d.vendor_id, d.device_id, bus_of(d.bus_id)) != nullptr;
  });
}

bool has_fabric_classes_beyond_net(const std::string& sys) {
  for (const char* cls : {"bxi", "cxi"}) {
    std::error_code ec;
    if (!fs::is_empty(fs::path(sys) / "class" / cls, ec) && !ec) return true;
  }
  return false;
}

std::vector<Nic> sysfs_nics(const std::string& sys) {
  std::map<std::string, Nic> nic_of_device;
  auto scan = [&](const char* cls, bool openfabrics) {
    std::error_code ec;
    for (fs::directory_iterator it(fs::path(sys) / "class" / cls, ec);
         !ec && it != fs::directory_iterator(); it.increment(ec)) {
      const fs::directory_entry& entry = *it;
      const std::string bus_id = pci_device_of(entry.path());
      if (bus_id.empty()) continue;
      Nic& nic = nic_of_device[bus_id];
      const std::string name = entry.path().filename().string();
      if (openfabrics) nic.name = name;
      else nic.interfaces.push_back(name);
    }
  };
  scan("net", false);
  scan("infiniband", true);

  std::vector<Nic> out;
  for (auto& [bus_id, nic] : nic_of_device) {
    const fs::path dir = fs::path(sys) / "bus/pci/devices" / bus_id;
    std::sort(nic.interfaces.begin(), nic.interfaces.end());
    if (nic.name.empty()) nic.name = nic.interfaces.front();
    nic.vendor_id = std::uint16_t(hex_file(dir / "vendor").value_or(0));
    nic.device_id = std::uint16_t(hex_file(dir / "device").value_or(0));
    nic.location.bus_id = bus_id;
    const std::string numa = first_line_of(dir / "numa_node");
    if (!numa.empty() && numa != "-1") {
      try {
        nic.location.numa = std::stoi(numa);
      } catch (const std::exception&) {
      }
    }
    try {
      nic.location.cpus = parse_cpu_list(first_line_of(dir / "local_cpulist"));
    } catch (const Error&) {
      // Left empty: unknown locality, as for a device hwloc could not place.
    }
    out.push_back(std::move(nic));
  }
  return out;
}

}  // namespace muster
