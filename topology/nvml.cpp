#include "topology/nvml.h"

#include <dlfcn.h>

#include <cstdio>

#include <fmt/format.h>

namespace muster {
namespace {

// The few NVML declarations muster uses, as the NVML API documents them; NVML's header is
// not installed on CPU-only machines, and muster must build there.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr unsigned kNvmlMaxLinks = 18;
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

struct NvmlLibrary {
  void* handle = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*by_bus_id)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*link_remote)(nvmlDevice_t, unsigned, nvmlPciInfo_t*) = nullptr;

  ~NvmlLibrary() {
    if (shutdown) shutdown();
    if (handle) dlclose(handle);
  }

  template <typename Fn>
  bool bind(Fn& fn, const char* symbol) {
    fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
    return fn != nullptr;
  }
};

}  // namespace

std::string normalise_bus_id(const std::string& bus_id) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4)
    return bus_id;
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, device, function);
}

std::optional<NvmlFacts> query_nvml(const std::vector<std::string>& gpu_bus_ids,
                                    std::string& why_not) {
  NvmlLibrary nvml;
  nvml.handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!nvml.handle) {
    why_not = "libnvidia-ml.so.1 did not load (no NVIDIA driver here)";
    return std::nullopt;
  }
  if (!nvml.bind(nvml.init, "nvmlInit_v2") ||
      !nvml.bind(nvml.by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") ||
      !nvml.bind(nvml.name, "nvmlDeviceGetName") || !nvml.bind(nvml.uuid, "nvmlDeviceGetUUID") ||
      !nvml.bind(nvml.link_state, "nvmlDeviceGetNvLinkState") ||
      !nvml.bind(nvml.link_remote, "nvmlDeviceGetNvLinkRemotePciInfo_v2")) {
    why_not = "libnvidia-ml.so.1 lacks the functions muster uses (driver too old)";
    return std::nullopt;
  }
  if (nvml.init() != kNvmlSuccess) {
    why_not = "NVML did not initialise (is the NVIDIA driver loaded?)";
    return std::nullopt;
  }
  nvml.bind(nvml.shutdown, "nvmlShutdown");

  NvmlFacts facts;
  const size_t n = gpu_bus_ids.size();
  facts.nvlinks.assign(n, std::vector<int>(n, 0));
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < n; ++i) index_of[normalise_bus_id(gpu_bus_ids[i])] = i;
  // Links into NVSwitches (devices that are not among the GPUs) connect a GPU to all others.
  std::vector<int> switch_links(n, 0);
  for (size_t i = 0; i < n; ++i) {
    nvmlDevice_t device = nullptr;
    if (nvml.by_bus_id(gpu_bus_ids[i].c_str(), &device) != kNvmlSuccess) continue;
    char text[96] = {};
    NvmlGpuFacts gpu;
    if (nvml.name(device, text, sizeof text) == kNvmlSuccess) gpu.name = text;
    if (nvml.uuid(device, text, sizeof text) == kNvmlSuccess) gpu.uuid = text;
    facts.by_bus_id[normalise_bus_id(gpu_bus_ids[i])] = gpu;
    for (unsigned link = 0; link < kNvmlMaxLinks; ++link) {
      int active = 0;
      if (nvml.link_state(device, link, &active) != kNvmlSuccess || !active) continue;
      nvmlPciInfo_t remote = {};
      if (nvml.link_remote(device, link, &remote) != kNvmlSuccess) continue;
      auto peer = index_of.find(normalise_bus_id(remote.busId));
      if (peer != index_of.end())
        ++facts.nvlinks[i][peer->second];
      else
        ++switch_links[i];
    }
  }
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (i != j && facts.nvlinks[i][j] == 0 && switch_links[i] > 0 && switch_links[j] > 0)
        facts.nvlinks[i][j] = std::min(switch_links[i], switch_links[j]);
  return facts;
}

}  // namespace muster
