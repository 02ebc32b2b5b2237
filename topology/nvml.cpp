#include "topology/nvml.h"

#include <dlfcn.h>

#include <cstdio>

#include <fmt/format.h>

#include "launcher/node_library.h"
#include "topology/nvml_api.h"

namespace muster {
namespace {

using namespace nvml_api;

struct NvmlLibrary {
  NodeLibrary library{"libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL};
  nvml_api::Init init = nullptr;
  nvml_api::Shutdown shutdown = nullptr;
  nvml_api::DeviceGetHandleByPciBusId by_bus_id = nullptr;
  nvml_api::DeviceGetName name = nullptr;
  nvml_api::DeviceGetUUID uuid = nullptr;
  nvml_api::DeviceGetNvLinkState link_state = nullptr;
  nvml_api::DeviceGetNvLinkRemotePciInfo link_remote = nullptr;
  nvml_api::DeviceGetNvLinkRemoteDeviceType link_remote_type = nullptr;  // NVML 11 and later
  nvml_api::DeviceGetCurrentClocksThrottleReasons throttle_reasons = nullptr;
  nvml_api::DeviceGetClockInfo clock = nullptr, max_clock = nullptr;

  ~NvmlLibrary() {
    if (shutdown) shutdown();  // before the library closes, with its member
  }

  template <typename Fn>
  bool bind(Fn& fn, const char* symbol) {
    return library.bind(fn, symbol);
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
  if (!nvml.library.loaded()) {
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
  if (nvml.init() != kSuccess) {
    why_not = "NVML did not initialise (is the NVIDIA driver loaded?)";
    return std::nullopt;
  }
  nvml.bind(nvml.shutdown, "nvmlShutdown");
  nvml.bind(nvml.link_remote_type, "nvmlDeviceGetNvLinkRemoteDeviceType");
  // A driver that drops the deprecated name still answers under the new one.
  if (!nvml.bind(nvml.throttle_reasons, "nvmlDeviceGetCurrentClocksEventReasons"))
    nvml.bind(nvml.throttle_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
  nvml.bind(nvml.clock, "nvmlDeviceGetClockInfo");
  nvml.bind(nvml.max_clock, "nvmlDeviceGetMaxClockInfo");

  NvmlFacts facts;
  const size_t n = gpu_bus_ids.size();
  facts.nvlinks.assign(n, std::vector<int>(n, 0));
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < n; ++i) index_of[normalise_bus_id(gpu_bus_ids[i])] = i;
  // Links into NVSwitches connect a GPU to all others; links to a CPU (an IBM NPU, Grace)
  // to none. Without NVML's remote device type (before NVML 11), a link to a device that is
  // not one of the GPUs is taken for an NVSwitch link.
  std::vector<int> switch_links(n, 0);
  std::vector<int> cpu_links(n, 0);
  for (size_t i = 0; i < n; ++i) {
    nvmlDevice_t device = nullptr;
    if (nvml.by_bus_id(gpu_bus_ids[i].c_str(), &device) != kSuccess) continue;
    char text[96] = {};
    NvmlGpuFacts gpu;
    if (nvml.name(device, text, sizeof text) == kSuccess) gpu.name = text;
    if (nvml.uuid(device, text, sizeof text) == kSuccess) gpu.uuid = text;
    unsigned long long reasons = 0;
    if (nvml.throttle_reasons && nvml.throttle_reasons(device, &reasons) == kSuccess) gpu.throttle_reasons = reasons;
    unsigned mhz = 0;
    if (nvml.clock && nvml.clock(device, kClockSm, &mhz) == kSuccess) gpu.sm_clock_mhz = mhz;
    if (nvml.max_clock && nvml.max_clock(device, kClockSm, &mhz) == kSuccess) gpu.max_sm_clock_mhz = mhz;
    facts.by_bus_id[normalise_bus_id(gpu_bus_ids[i])] = gpu;
    for (unsigned link = 0; link < kMaxLinks; ++link) {
      int active = 0;
      if (nvml.link_state(device, link, &active) != kSuccess || !active) continue;
      nvmlPciInfo_t remote = {};
      if (nvml.link_remote(device, link, &remote) != kSuccess) continue;
      auto peer = index_of.find(normalise_bus_id(remote.busId));
      int type = kLinkToUnknown;
      if (nvml.link_remote_type && nvml.link_remote_type(device, link, &type) != kSuccess)
        type = kLinkToUnknown;
      if (peer != index_of.end())
        ++facts.nvlinks[i][peer->second];
      else if (type == kLinkToIbmNpu)
        ++cpu_links[i];
      else
        ++switch_links[i];
    }
    if (cpu_links[i] > 0) facts.cpu_links.push_back({int(i), cpu_links[i]});
  }
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j)
      if (i != j && facts.nvlinks[i][j] == 0 && switch_links[i] > 0 && switch_links[j] > 0)
        facts.nvlinks[i][j] = std::min(switch_links[i], switch_links[j]);
  return facts;
}

}  // namespace muster
