// The only file that sees hwloc: it turns hwloc's object tree into muster's Topology.
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <tuple>
#include <mutex>

#include <fmt/format.h>
#include <hwloc.h>

#include "launcher/error.h"
#include "topology/nvml.h"
#include "topology/sysfs_pci.h"
#include "topology/topology_source.h"

namespace muster {
namespace {

using TopologyHandle = std::unique_ptr<hwloc_topology, decltype(&hwloc_topology_destroy)>;

std::vector<int> cpus_of(hwloc_const_cpuset_t set) {
  std::vector<int> out;
  if (!set) return out;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) out.push_back(i);
  return out;
}

std::string bus_id_of(hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", a.domain, a.bus, a.dev, a.func);
}

bool is_pci_bridge(hwloc_obj_t obj) {
  return obj && obj->type == HWLOC_OBJ_BRIDGE &&
         obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI;
}

// A PCIe switch shows up as an upstream-port bridge whose children are its downstream-port
// bridges, all of one vendor:device. Cascaded switches of the same chip are told apart by
// alternation: a port below a downstream port is the next switch's upstream port.
bool is_downstream_port(hwloc_obj_t bridge) {
  hwloc_obj_t parent = bridge->parent;
  if (!is_pci_bridge(bridge) || !is_pci_bridge(parent)) return false;
  if (parent->attr->pcidev.vendor_id != bridge->attr->pcidev.vendor_id ||
      parent->attr->pcidev.device_id != bridge->attr->pcidev.device_id)
    return false;
  return !is_downstream_port(parent);
}

PciLocation location_of(hwloc_topology_t topo, hwloc_obj_t pci) {
  PciLocation loc;
  loc.bus_id = bus_id_of(pci);
  loc.link_gbps = pci->attr->pcidev.linkspeed;
  for (hwloc_obj_t up = pci->parent; up; up = up->parent) {
    if (up->type == HWLOC_OBJ_BRIDGE) {
      bool host = up->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
      std::uint64_t switch_id = is_downstream_port(up) ? up->parent->gp_index : up->gp_index;
      loc.hops.push_back({host ? PciHop::Kind::HostBridge : PciHop::Kind::PciBridge,
                          up->gp_index, switch_id});
      continue;
    }
    if (hwloc_obj_type_is_io(up->type)) continue;  // a PCI device that bridges (rare)
    loc.hops.push_back({PciHop::Kind::Cpu, up->gp_index, up->gp_index});
    break;
  }
  // I/O objects have no cpuset: locality is that of the first non-I/O ancestor.
  hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(topo, pci);
  if (cpu_side) {
    loc.cpus = cpus_of(cpu_side->cpuset);
    if (cpu_side->nodeset && hwloc_bitmap_weight(cpu_side->nodeset) == 1)
      loc.numa = hwloc_bitmap_first(cpu_side->nodeset);
  }
  return loc;
}

const char* gpu_vendor(hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  return gpu_vendor_of(a.class_id, a.vendor_id, a.device_id, a.bus);
}

std::string info_of(hwloc_obj_t obj, const char* name) {
  const char* v = hwloc_obj_get_info_by_name(obj, name);
  return v ? v : "";
}

std::string gpu_model(hwloc_obj_t pci) {
  for (hwloc_obj_t child = pci->io_first_child; child; child = child->next_sibling) {
    std::string model = info_of(child, "GPUModel");
    if (!model.empty()) return model;
  }
  std::string name = info_of(pci, "PCIDevice");
  if (!name.empty()) return name;
  return fmt::format("{:04x}:{:04x}", pci->attr->pcidev.vendor_id, pci->attr->pcidev.device_id);
}

std::optional<std::string> gpu_uuid(hwloc_obj_t pci) {
  for (hwloc_obj_t child = pci->io_first_child; child; child = child->next_sibling) {
    std::string uuid = info_of(child, "NVIDIAUUID");
    if (!uuid.empty()) return uuid;
  }
  return std::nullopt;
}

// hwloc's NVLinkBandwidth matrix (MB/s) as link counts; NVLink 2 to 4 carry 25 GB/s per link
// and direction, NVLink 1 20 GB/s. Its objects are GPUs, NVSwitches (PCI devices that are not
// GPUs) and, on machines whose CPUs speak NVLink (IBM POWER, NVIDIA Grace), CPU packages.
// Links into NVSwitches connect a GPU with every other; links to a CPU connect it to none:
// two GPUs that each reach a CPU are only as close as PCIe and the CPUs make them.
void nvlinks_from_hwloc(hwloc_topology_t topo, const std::map<std::uint64_t, int>& gpu_of_pci,
                        Topology& t) {
  unsigned count = 1;
  hwloc_distances_s* distances = nullptr;
  if (hwloc_distances_get_by_name(topo, "NVLinkBandwidth", &count, &distances, 0) != 0 ||
      count == 0)
    return;
  const size_t n_gpus = gpu_of_pci.size();
  std::vector<std::vector<int>> links(n_gpus, std::vector<int>(n_gpus, 0));
  std::vector<int> switch_links(n_gpus, 0);
  auto gpu_index = [&](hwloc_obj_t obj) -> int {
    if (obj && obj->type == HWLOC_OBJ_OS_DEVICE) obj = obj->parent;
    if (!obj) return -1;
    auto it = gpu_of_pci.find(obj->gp_index);
    return it == gpu_of_pci.end() ? -1 : it->second;
  };
  // The package a CPU-side object belongs to, or nullopt for an I/O object (a switch).
  auto package_of = [](hwloc_obj_t obj) -> std::optional<int> {
    if (!obj || hwloc_obj_type_is_io(obj->type)) return std::nullopt;
    for (hwloc_obj_t up = obj; up; up = up->parent)
      if (up->type == HWLOC_OBJ_PACKAGE) return int(up->os_index);
    return 0;  // the machine itself, when it has no package level
  };
  auto to_links = [](std::uint64_t bandwidth) {
    if (bandwidth == 0) return 0;
    if (bandwidth % 25000 == 0) return int(bandwidth / 25000);
    if (bandwidth % 20000 == 0) return int(bandwidth / 20000);
    return std::max(1, int(std::lround(double(bandwidth) / 25000)));
  };
  const unsigned n = distances->nbobjs;
  for (unsigned i = 0; i < n; ++i) {
    int a = gpu_index(distances->objs[i]);
    if (a < 0) continue;
    for (unsigned j = 0; j < n; ++j) {
      if (i == j) continue;
      int l = to_links(distances->values[i * n + j]);
      if (l == 0) continue;
      if (int b = gpu_index(distances->objs[j]); b >= 0) links[size_t(a)][size_t(b)] = l;
      else if (auto package = package_of(distances->objs[j])) t.cpu_nvlinks.push_back({a, *package, l});
      else switch_links[size_t(a)] += l;
    }
  }
  hwloc_distances_release(topo, distances);
  for (size_t i = 0; i < n_gpus; ++i)
    for (size_t j = 0; j < n_gpus; ++j)
      if (i != j && links[i][j] == 0 && switch_links[i] > 0 && switch_links[j] > 0)
        links[i][j] = std::min(switch_links[i], switch_links[j]);
  std::sort(t.cpu_nvlinks.begin(), t.cpu_nvlinks.end(),
            [](const CpuNvlink& x, const CpuNvlink& y) { return std::tie(x.gpu, x.package) < std::tie(y.gpu, y.package); });
  t.nvlinks = std::move(links);
}

// hwloc unloads its plugins when the last topology goes, and loads them again for the next.
// The PCI plugin's libpciaccess keeps its state in its own globals, so unloading turns that
// state into a leak (LeakSanitizer reports it): once loaded, the plugins stay for good.
void keep_plugins_loaded() {
  dl_iterate_phdr([](dl_phdr_info* info, size_t, void*) {
    const std::string name = info->dlpi_name ? info->dlpi_name : "";
    if (name.find("/hwloc_") != std::string::npos) dlopen(name.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    return 0;
  }, nullptr);
}

// hwloc places a device for which sysfs has no NUMA node (-1: the firmware gave none) under
// the smallest object holding its local CPUs: its NUMA node is the one those CPUs are in.
void place_like_hwloc(PciLocation& loc, const Topology& t) {
  // hwloc's CPU sets hold only the CPUs this process may use (a cgroup, a Slurm step).
  const std::vector<int> usable = t.all_cpus();
  std::vector<int> local;
  std::set_intersection(loc.cpus.begin(), loc.cpus.end(), usable.begin(), usable.end(),
                        std::back_inserter(local));
  loc.cpus = local.empty() ? usable : local;
  if (loc.numa) return;
  std::optional<int> only;
  for (const auto& numa : t.numa_nodes) {
    const bool holds = std::any_of(loc.cpus.begin(), loc.cpus.end(), [&](int cpu) {
      return std::find(numa.cpus.begin(), numa.cpus.end(), cpu) != numa.cpus.end();
    });
    if (!holds) continue;
    if (only) return;  // CPUs on several NUMA nodes: none is the device's own
    only = numa.index;
  }
  loc.numa = only;
}

// hwloc discovers something other than this machine's own files: an export, a synthetic
// machine, another root, or components of the user's choice. Then hwloc alone decides.
bool hwloc_redirected() {
  for (const char* name : {"HWLOC_XMLFILE", "HWLOC_SYNTHETIC", "HWLOC_FSROOT", "HWLOC_COMPONENTS"})
    if (std::getenv(name)) return true;
  return false;
}

// Whether this discovery can leave hwloc's PCI walk out: asked to, of this machine, and
// sysfs lists every PCI device and none is a GPU.
bool without_pci_walk(PciWalk walk, const std::optional<std::string>& xml_path) {
  if (walk != PciWalk::OnlyWithGpus || xml_path || hwloc_redirected()) return false;
  auto devices = sysfs_pci_devices();
  return devices && !any_gpu(*devices) && !has_fabric_classes_beyond_net();
}

TopologyHandle open_topology(const std::optional<std::string>& xml_path, bool pci_walk) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw Error(ErrorKind::Runtime, "hwloc failed to start");
  TopologyHandle topo(raw, &hwloc_topology_destroy);
  hwloc_topology_set_io_types_filter(raw, pci_walk ? HWLOC_TYPE_FILTER_KEEP_ALL : HWLOC_TYPE_FILTER_KEEP_NONE);
  // muster reads no display. hwloc's gl component would try X displays :0 to :9 on every
  // discovery, each with a name lookup: one lost DNS reply cost a fresh node 5 s. Left out
  // of this topology only, through hwloc's API: the ranks' own hwloc is theirs.
  hwloc_topology_set_components(raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "gl");
  if (xml_path) {
    int fd = open(xml_path->c_str(), O_RDONLY);
    if (fd < 0)
      throw Error(ErrorKind::Config, fmt::format("{}: cannot read the topology file: {}",
                                                 *xml_path, std::strerror(errno)));
    close(fd);
    if (hwloc_topology_set_xml(raw, xml_path->c_str()) != 0 || hwloc_topology_load(raw) != 0)
      throw Error(ErrorKind::Config,
                  fmt::format("{}: not an hwloc XML topology that hwloc {}.{} can read; write "
                              "one with 'lstopo FILE.xml' (hwloc 2.x format)", *xml_path,
                              HWLOC_API_VERSION >> 16, (HWLOC_API_VERSION >> 8) & 0xff));
    static std::once_flag once;
    std::call_once(once, keep_plugins_loaded);
    return topo;
  }
  if (hwloc_topology_load(raw) != 0)
    throw Error(ErrorKind::Runtime, fmt::format("hwloc could not discover this machine: {}",
                                                std::strerror(errno)));
  static std::once_flag once;
  std::call_once(once, keep_plugins_loaded);
  return topo;
}

}  // namespace

Topology HwlocTopologySource::load() {
  const bool pci_walk = !without_pci_walk(pci_walk_, xml_path_);
  TopologyHandle handle = open_topology(xml_path_, pci_walk);
  hwloc_topology_t topo = handle.get();
  Topology t;
  t.pci_walked = pci_walk;
  t.source = xml_path_ ? *xml_path_ : "this machine";
  t.is_this_machine = !xml_path_ && hwloc_topology_is_thissystem(topo);
  if (!xml_path_ && !t.is_this_machine) {  // hwloc honours HWLOC_XMLFILE and friends
    const char* file = std::getenv("HWLOC_XMLFILE");
    t.source = file ? fmt::format("HWLOC_XMLFILE={}", file) : "a simulated topology";
  }
  t.packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  t.cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  t.pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  for (hwloc_obj_t numa = nullptr;
       (numa = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, numa));)
    t.numa_nodes.push_back({int(numa->os_index), numa->attr->numanode.local_memory,
                            cpus_of(numa->cpuset)});

  for (hwloc_obj_t core = nullptr;
       (core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, core));)
    t.core_cpus.push_back(cpus_of(core->cpuset));
  if (t.core_cpus.empty())  // no core level (some VMs, trimmed exports): a PU is a core
    for (hwloc_obj_t pu = nullptr; (pu = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PU, pu));)
      t.core_cpus.push_back({int(pu->os_index)});

  std::vector<hwloc_obj_t> gpu_objects;
  std::map<std::uint64_t, Nic> nic_of_pci;
  for (hwloc_obj_t pci = nullptr; (pci = hwloc_get_next_pcidev(topo, pci));)
    if (gpu_vendor(pci)) gpu_objects.push_back(pci);
  for (hwloc_obj_t os = nullptr; (os = hwloc_get_next_osdev(topo, os));) {
    auto type = os->attr->osdev.type;
    if (type != HWLOC_OBJ_OSDEV_NETWORK && type != HWLOC_OBJ_OSDEV_OPENFABRICS) continue;
    hwloc_obj_t pci = os->parent;
    if (!pci || pci->type != HWLOC_OBJ_PCI_DEVICE) continue;
    Nic& nic = nic_of_pci[pci->gp_index];
    if (nic.location.bus_id.empty()) {
      nic.location = location_of(topo, pci);
      nic.vendor_id = pci->attr->pcidev.vendor_id;
      nic.device_id = pci->attr->pcidev.device_id;
    }
    if (type == HWLOC_OBJ_OSDEV_OPENFABRICS) nic.name = os->name;
    else nic.interfaces.push_back(os->name);
  }
  for (auto& [gp, nic] : nic_of_pci) {
    std::sort(nic.interfaces.begin(), nic.interfaces.end());  // not sysfs's hash order
    if (nic.name.empty() && !nic.interfaces.empty()) nic.name = nic.interfaces.front();
    t.nics.push_back(std::move(nic));
  }
  if (!pci_walk) {
    t.nics = sysfs_nics();
    for (Nic& nic : t.nics) place_like_hwloc(nic.location, t);
  }
  std::sort(t.nics.begin(), t.nics.end(),
            [](const Nic& a, const Nic& b) { return a.location.bus_id < b.location.bus_id; });

  std::sort(gpu_objects.begin(), gpu_objects.end(),
            [](hwloc_obj_t a, hwloc_obj_t b) { return bus_id_of(a) < bus_id_of(b); });
  std::map<std::uint64_t, int> gpu_of_pci;
  std::vector<int> package_of_gpu;  // the package a GPU hangs off, where hwloc knows one
  for (hwloc_obj_t pci : gpu_objects) {
    hwloc_obj_t package = hwloc_get_non_io_ancestor_obj(topo, pci);
    if (package && package->type != HWLOC_OBJ_PACKAGE)
      package = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, package);
    package_of_gpu.push_back(package ? int(package->os_index) : 0);
    Gpu gpu;
    gpu.index = int(t.gpus.size());
    gpu.vendor = gpu_vendor(pci);
    gpu.vendor_id = pci->attr->pcidev.vendor_id;
    gpu.device_id = pci->attr->pcidev.device_id;
    gpu.model = gpu_model(pci);
    gpu.uuid = gpu_uuid(pci);
    gpu.location = location_of(topo, pci);
    gpu_of_pci[pci->gp_index] = gpu.index;
    t.gpus.push_back(std::move(gpu));
  }

  nvlinks_from_hwloc(topo, gpu_of_pci, t);
  t.nvlink_source = t.nvlinks ? "hwloc's NVLinkBandwidth matrix" : "unknown";
  bool has_nvidia = std::any_of(t.gpus.begin(), t.gpus.end(),
                                [](const Gpu& g) { return g.vendor_id == 0x10de; });
  if (t.is_this_machine && has_nvidia) {
    std::vector<std::string> bus_ids;
    for (const auto& g : t.gpus) bus_ids.push_back(g.location.bus_id);
    std::string why_not;
    if (auto facts = query_nvml(bus_ids, why_not)) {
      for (auto& g : t.gpus) {
        auto it = facts->by_bus_id.find(g.location.bus_id);
        if (it == facts->by_bus_id.end()) continue;
        if (!it->second.name.empty()) g.model = it->second.name;
        if (!it->second.uuid.empty()) g.uuid = it->second.uuid;
      }
      t.nvlinks = facts->nvlinks;
      t.nvlink_source = "NVML";
      // NVML names no package: the CPU a GPU's links reach is the one the GPU hangs off.
      t.cpu_nvlinks.clear();
      for (auto [gpu, links] : facts->cpu_links)
        t.cpu_nvlinks.push_back({gpu, package_of_gpu[size_t(gpu)], links});
    } else if (!t.nvlinks) {
      t.nvlink_source = "unknown: " + why_not;
    }
  } else if (!t.nvlinks && !t.gpus.empty()) {
    t.nvlink_source = t.is_this_machine ? "unknown: no NVIDIA GPU" : "unknown: the export has no NVLink data";
  }
  hwloc_ = std::shared_ptr<void>(handle.release(), [](void* kept) { hwloc_topology_destroy(static_cast<hwloc_topology_t>(kept)); });
  return t;
}

std::vector<std::string> hwloc_plugin_files() {
  std::vector<std::string> files;
  TopologyHandle handle = open_topology(std::nullopt, /*pci_walk=*/true);  // loads the plugins
  dl_iterate_phdr([](dl_phdr_info* info, size_t, void* out) {
    const std::string name = info->dlpi_name ? info->dlpi_name : "";
    const auto slash = name.rfind('/');
    if (slash != std::string::npos && name.compare(slash + 1, 10, "hwloc_pci.") == 0)
      static_cast<std::vector<std::string>*>(out)->push_back(name);
    return 0;
  }, &files);
  return files;
}

}  // namespace muster
