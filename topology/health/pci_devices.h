// The node's GPUs and NICs as sysfs lists them on the PCI bus, with the bridges above each:
// read once, used by the PCIe, GPU and Xid checks. Internal to topology/health/.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "topology/health/sysfs_reading.h"

namespace muster::health {

enum class Role { Gpu, Nic };

struct PciDevice {
  std::string bus_id;
  Role role = Role::Nic;
  std::string label;             // "GPU0 0000:18:00.0", "mlx5_0 0000:3b:00.0", "bridge 0000:00:01.0"
  fs::path dir;                  // the device's directory (the link resolved where it is one)
  std::vector<std::string> upstream;  // bus ids of the bridges above it, nearest first
  bool nvidia_gpu = false;
};

struct PciView {
  bool listed = false;
  std::string why_not;
  std::vector<PciDevice> devices;  // GPUs and NICs, in bus id order
  std::vector<std::string> nvidia_gpus;  // bus ids
};

// The GPUs and NICs under ROOT/sys/bus/pci/devices; `gpu_names`: NVML's name for each GPU's
// bus id, where NVML answered.
PciView read_pci(const Root& root, const std::map<std::string, std::string>& gpu_names);

}  // namespace muster::health
