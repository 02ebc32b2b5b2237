// Where a Topology comes from: this machine or an hwloc XML export, behind an interface so
// that tests of what uses a topology can hand in a fixed one.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "topology/topology.h"

namespace muster {

class TopologySource {
 public:
  virtual ~TopologySource() = default;
  // Discovers the topology. Throws Error(Config) for an unreadable or non-hwloc file.
  virtual Topology load() = 0;
};

// Whether discovery walks the PCI tree on a machine without GPUs. hwloc's walk reads 256
// bytes of every device's config space, and in a VM each 4-byte read traps to the host:
// 19 of an agent's 42 ms of CPU on the test VM. Only GPUs are placed by where they sit on
// the tree, so an agent on a node whose sysfs lists no GPU takes its NICs from sysfs.
enum class PciWalk {
  Always,        // muster topo, plan and local runs: every detail, on every machine
  OnlyWithGpus,  // an agent's hello: GPUs with their paths; otherwise NICs from sysfs
};

// hwloc with I/O discovery (no CUDA needed), plus NVML's names, UUIDs and NVLink counts
// when this machine has libnvidia-ml.so.1.
class HwlocTopologySource : public TopologySource {
 public:
  // This machine when `xml_path` is unset, else the export written by `lstopo FILE.xml`.
  explicit HwlocTopologySource(std::optional<std::string> xml_path = std::nullopt,
                               PciWalk pci_walk = PciWalk::Always)
      : xml_path_(std::move(xml_path)), pci_walk_(pci_walk) {}
  Topology load() override;
  // hwloc's own topology of the last successful load() (an hwloc_topology_t), alive for as
  // long as any holder keeps it: for a library that would otherwise discover this machine a
  // second time in this process (PMIx's server takes it as PMIX_TOPOLOGY2). Null before a
  // load. Without the PCI walk it has no I/O devices.
  std::shared_ptr<void> hwloc_topology() const { return hwloc_; }

 private:
  std::optional<std::string> xml_path_;
  PciWalk pci_walk_;
  std::shared_ptr<void> hwloc_;
};

// The files of the hwloc plugins muster's discovery needs on this machine (the PCI one:
// GPUs and NICs are PCI devices, and Debian's hwloc finds them through a plugin), as hwloc
// loads them into this process while discovering it. Empty when hwloc has them built in.
std::vector<std::string> hwloc_plugin_files();

}  // namespace muster
