// Where a Topology comes from: this machine or an hwloc XML export, behind an interface so
// that tests of what uses a topology can hand in a fixed one.
#pragma once

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

// hwloc with I/O discovery (no CUDA needed), plus NVML's names, UUIDs and NVLink counts
// when this machine has libnvidia-ml.so.1.
class HwlocTopologySource : public TopologySource {
 public:
  // This machine when `xml_path` is unset, else the export written by `lstopo FILE.xml`.
  explicit HwlocTopologySource(std::optional<std::string> xml_path = std::nullopt)
      : xml_path_(std::move(xml_path)) {}
  Topology load() override;

 private:
  std::optional<std::string> xml_path_;
};

// The files of the hwloc plugins muster's discovery needs on this machine (the PCI one:
// GPUs and NICs are PCI devices, and Debian's hwloc finds them through a plugin), as hwloc
// loads them into this process while discovering it. Empty when hwloc has them built in.
std::vector<std::string> hwloc_plugin_files();

}  // namespace muster
