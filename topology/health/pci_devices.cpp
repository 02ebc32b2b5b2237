#include "topology/health/pci_devices.h"

#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "topology/sysfs_pci.h"

namespace muster::health {

namespace {

// The names each PCI function has in SYS/class/CLASS ("mlx5_0", "eth0").
std::map<std::string, std::vector<std::string>> class_names(const Root& root, const std::string& cls) {
  std::map<std::string, std::vector<std::string>> out;
  const fs::path dir = root.at("/sys/class/" + cls);
  for (const auto& name : list_dir(dir).value_or(std::vector<std::string>{})) {
    std::string bus = pci_function_of(dir / name);
    if (!bus.empty()) out[bus].push_back(name);
  }
  return out;
}

}  // namespace

PciView read_pci(const Root& root, const std::map<std::string, std::string>& gpu_names) {
  PciView view;
  const fs::path devices = root.at("/sys/bus/pci/devices");
  auto names = list_dir(devices);
  if (!names) {
    view.why_not = fmt::format("cannot list {}", devices.string());
    return view;
  }
  view.listed = true;
  auto ib = class_names(root, "infiniband"), net = class_names(root, "net");
  int gpu_index = 0;
  for (const auto& bus_id : *names) {
    if (!looks_like_bus_id(bus_id)) continue;
    const fs::path entry = devices / bus_id;
    auto cls = read_hex(entry / "class"), vendor = read_hex(entry / "vendor");
    if (!cls || !vendor) continue;
    // An SR-IOV virtual function has no link of its own (its link registers read zero); its
    // physical function's link is the one checked.
    std::error_code vf;
    if (fs::is_symlink(entry / "physfn", vf)) continue;
    PciDevice d;
    d.bus_id = bus_id;
    unsigned bus = 0, domain = 0;
    std::sscanf(bus_id.c_str(), "%x:%x", &domain, &bus);
    // A snapshot may lack the device id: read as 0, which no old ATI chip has, a GPU vendor's
    // display still counts.
    const auto device = read_hex(entry / "device").value_or(0);
    const bool gpu = gpu_vendor_of(unsigned(*cls >> 8), std::uint16_t(*vendor), std::uint16_t(device),
                                   bus) != nullptr;
    const bool nic = (*cls >> 16) == 0x02 || ib.count(bus_id);
    if (!gpu && !nic) continue;
    d.role = gpu ? Role::Gpu : Role::Nic;
    d.nvidia_gpu = gpu && *vendor == 0x10de;
    if (d.nvidia_gpu) view.nvidia_gpus.push_back(bus_id);
    if (gpu) {
      auto name = gpu_names.find(bus_id);
      d.label = fmt::format("GPU{} {}{}", gpu_index++, bus_id, name == gpu_names.end() ? "" : " " + name->second);
    }
    else {
      std::vector<std::string> named = ib.count(bus_id) ? ib[bus_id] : net[bus_id];
      d.label = named.empty() ? fmt::format("NIC {}", bus_id) : fmt::format("{} {}", fmt::join(named, "/"), bus_id);
    }
    // In the kernel's sysfs the entry is a link into the device tree, whose directories are
    // the bridges above it; a snapshot may hold plain directories, which name no bridge.
    std::error_code ec;
    d.dir = fs::canonical(entry, ec);
    if (ec) d.dir = entry;
    for (fs::path p = d.dir.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
      const std::string name = p.filename().string();
      if (looks_like_bus_id(name)) d.upstream.push_back(name);
      else if (name.rfind("pci", 0) == 0 || name == "devices") break;
    }
    view.devices.push_back(std::move(d));
  }
  return view;
}

}  // namespace muster::health
