#include "topology/topology.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace muster {

std::string PathCell::str() const {
  switch (type) {
    case PathType::X: return "X";
    case PathType::NV: return fmt::format("NV{}", nvlinks);
    case PathType::PIX: return "PIX";
    case PathType::PXB: return "PXB";
    case PathType::PHB: return "PHB";
    case PathType::NODE: return "NODE";
    case PathType::SYS: return "SYS";
  }
  return "?";
}

std::vector<int> Topology::all_cpus() const {
  std::vector<int> out;
  for (const auto& n : numa_nodes) out.insert(out.end(), n.cpus.begin(), n.cpus.end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

PathType classify_pci_path(const PciLocation& a, const PciLocation& b) {
  if (a.bus_id == b.bus_id) return PathType::X;
  // The lowest hop both devices pass through.
  for (size_t i = 0; i < a.hops.size(); ++i) {
    for (size_t j = 0; j < b.hops.size(); ++j) {
      if (a.hops[i].id != b.hops[j].id) continue;
      const PciHop& common = a.hops[i];
      if (common.kind == PciHop::Kind::HostBridge) return PathType::PHB;
      if (common.kind == PciHop::Kind::Cpu) break;  // decided by NUMA below
      // Below one host bridge: count PCIe switches on the way, a switch counting once
      // however many of its ports the path crosses (as NCCL does).
      std::set<std::uint64_t> switches = {common.switch_id};
      for (size_t k = 0; k < i; ++k) switches.insert(a.hops[k].switch_id);
      for (size_t k = 0; k < j; ++k) switches.insert(b.hops[k].switch_id);
      return switches.size() <= 1 ? PathType::PIX : PathType::PXB;
    }
  }
  if (a.numa && b.numa && *a.numa == *b.numa) return PathType::NODE;
  return PathType::SYS;
}

PathCell gpu_to_gpu(const Topology& topology, int i, int j) {
  if (i == j) return {PathType::X, 0};
  if (topology.nvlinks) {
    int links = (*topology.nvlinks)[size_t(i)][size_t(j)];
    if (links > 0) return {PathType::NV, links};
  }
  return {classify_pci_path(topology.gpus[size_t(i)].location, topology.gpus[size_t(j)].location), 0};
}

PathCell gpu_to_nic(const Topology& topology, int gpu, int nic) {
  return {classify_pci_path(topology.gpus[size_t(gpu)].location,
                            topology.nics[size_t(nic)].location), 0};
}

std::vector<int> nearest_nics(const Topology& topology, int gpu) {
  std::vector<int> best;
  PathType best_type = PathType::SYS;
  double best_speed = -1;
  for (size_t n = 0; n < topology.nics.size(); ++n) {
    PathType type = gpu_to_nic(topology, gpu, int(n)).type;
    double speed = topology.nics[n].location.link_gbps;
    if (best.empty() || type < best_type || (type == best_type && speed > best_speed)) {
      best = {int(n)};
      best_type = type;
      best_speed = speed;
    } else if (type == best_type && speed == best_speed) {
      best.push_back(int(n));
    }
  }
  return best;
}

PathMatrix path_matrix(const Topology& topology) {
  PathMatrix m;
  const int gpus = int(topology.gpus.size());
  for (int g = 0; g < gpus; ++g) m.devices.push_back(fmt::format("GPU{}", g));
  for (const auto& nic : topology.nics) m.devices.push_back(nic.name);
  for (int g = 0; g < gpus; ++g) {
    auto& row = m.rows.emplace_back();
    for (int h = 0; h < gpus; ++h) row.push_back(gpu_to_gpu(topology, g, h).str());
    for (size_t n = 0; n < topology.nics.size(); ++n) row.push_back(gpu_to_nic(topology, g, int(n)).str());
    auto& nearest = m.nearest.emplace_back();
    for (int n : nearest_nics(topology, g)) nearest.push_back(topology.nics[size_t(n)].name);
  }
  return m;
}

}  // namespace muster
