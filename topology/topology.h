// What one machine is made of, as muster needs it: NUMA nodes and their CPUs, GPUs and
// NICs with their PCI locality, and the paths between them. hwloc types never appear here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace muster {

// One step up from a PCI device towards the CPUs.
struct PciHop {
  enum class Kind {
    PciBridge,   // a PCIe bridge: a root port or a port of a PCIe switch
    HostBridge,  // the PCIe root complex, where PCIe meets the CPU
    Cpu,         // the first non-I/O object (a package, a NUMA node, the machine)
  };
  Kind kind = Kind::PciBridge;
  std::uint64_t id = 0;         // unique within one topology
  std::uint64_t switch_id = 0;  // bridges of one PCIe switch (upstream + downstream ports) share it
};

// Where a PCI device sits: its chain of hops to the CPUs, and the CPUs that are local to it.
struct PciLocation {
  std::string bus_id;            // "0000:03:00.0"
  std::vector<PciHop> hops;      // nearest first
  std::optional<int> numa;       // NUMA node os index, when exactly one is local
  std::vector<int> cpus;         // PU os indexes local to the device
  double link_gbps = 0;          // PCIe link speed as hwloc reports it (GB/s), 0 if unknown
};

struct Gpu {
  int index = 0;                 // CUDA's number with CUDA_DEVICE_ORDER=PCI_BUS_ID: bus id order
  std::string vendor;            // "NVIDIA", "AMD", "Intel"
  std::uint16_t vendor_id = 0, device_id = 0;
  std::string model;             // from hwloc or NVML when known, else "10de:1094"
  std::optional<std::string> uuid;
  PciLocation location;
};

struct Nic {
  std::string name;                      // the OpenFabrics name (mlx5_0) if any, else the interface
  std::vector<std::string> interfaces;   // network interfaces (eth0, ib0)
  std::uint16_t vendor_id = 0, device_id = 0;
  PciLocation location;
};

struct NumaNode {
  int index = 0;                 // os index
  std::uint64_t memory_bytes = 0;
  std::vector<int> cpus;         // PU os indexes
};

// NVLinks from a GPU to a CPU package (IBM POWER's NVLink-attached CPUs, NVIDIA Grace): they
// carry the GPU's traffic to host memory, and join it to no other GPU.
struct CpuNvlink {
  int gpu = 0;
  int package = 0;  // the package's os index
  int links = 0;
};

// The path between two devices, in nvidia-smi topo -m's terms, best first.
enum class PathType { X, NV, PIX, PXB, PHB, NODE, SYS };

// The matrix cell between two devices: a path type and, for NV, the number of links.
struct PathCell {
  PathType type = PathType::SYS;
  int nvlinks = 0;
  std::string str() const;  // "X", "NV6", "PIX", ...
};

struct Topology {
  std::string source;            // "this machine" or the XML file
  bool is_this_machine = false;  // binding is only allowed against this machine
  int packages = 0;
  int cores = 0;
  int pus = 0;
  std::vector<NumaNode> numa_nodes;
  std::vector<std::vector<int>> core_cpus;  // each core's PU os indexes, in logical order
  std::vector<Gpu> gpus;         // by index
  std::vector<Nic> nics;         // in bus id order
  bool pci_walked = true;        // false: no GPU, NICs from sysfs without their PCI paths
  // NVLink counts between GPUs [i][j], when known (NVML at run time, or an XML export's
  // NVLinkBandwidth matrix); unset means NVLink is unknown.
  std::optional<std::vector<std::vector<int>>> nvlinks;
  std::string nvlink_source;     // where the counts came from, or why they are unknown
  std::vector<CpuNvlink> cpu_nvlinks;  // GPUs' NVLinks to CPUs, when any

  std::vector<int> all_cpus() const;
};

// The PCIe path between two devices; `a` and `b` are the same device when their bus ids match.
PathType classify_pci_path(const PciLocation& a, const PciLocation& b);

// GPU i to GPU j: X, NV# when NVLink connects them, else the PCIe path.
PathCell gpu_to_gpu(const Topology& topology, int i, int j);
// GPU to NIC: the PCIe path.
PathCell gpu_to_nic(const Topology& topology, int gpu, int nic);

// The NICs closest to a GPU: the best path type, ties kept when the link speed is equal.
std::vector<int> nearest_nics(const Topology& topology, int gpu);

// The matrix `nvidia-smi topo -m` prints, as its words: what a report draws for a node.
struct PathMatrix {
  std::vector<std::string> devices;            // "GPU0", "GPU1", ..., then the NICs' names
  std::vector<std::vector<std::string>> rows;  // one per GPU: its cell to every device
  std::vector<std::vector<std::string>> nearest;  // one per GPU: the names of its nearest NICs
  bool operator==(const PathMatrix&) const = default;
};
PathMatrix path_matrix(const Topology& topology);

}  // namespace muster
