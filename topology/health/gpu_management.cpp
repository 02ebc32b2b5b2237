#include "topology/health/gpu_management.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "launcher/node_library.h"
#include "topology/nvml.h"
#include "topology/nvml_api.h"

namespace muster {
namespace {

using namespace nvml_api;

// libnvidia-ml.so.1 with the entry points the health readings use. Only those needed to find
// the GPUs are required; any other one a driver lacks leaves its readings unknown.
struct NvmlHealthLibrary {
  NodeLibrary library{"libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL};
  nvml_api::Init init = nullptr;
  nvml_api::Shutdown shutdown = nullptr;
  nvml_api::DeviceGetCount count = nullptr;
  nvml_api::DeviceGetHandleByIndex by_index = nullptr;
  nvml_api::SystemGetDriverVersion driver_version = nullptr;
  nvml_api::SystemGetCudaDriverVersion cuda_driver_version = nullptr;
  nvml_api::DeviceGetPciInfo pci_info = nullptr;
  nvml_api::DeviceGetName name = nullptr;
  nvml_api::DeviceGetUUID uuid = nullptr;
  nvml_api::DeviceGetPersistenceMode persistence = nullptr;
  nvml_api::DeviceGetEccMode ecc_mode = nullptr;
  nvml_api::DeviceGetTotalEccErrors ecc_errors = nullptr;
  nvml_api::DeviceGetRetiredPagesPendingStatus retired_pending = nullptr;
  nvml_api::DeviceGetRemappedRows remapped_rows = nullptr;
  nvml_api::DeviceGetCurrentClocksThrottleReasons throttle_reasons = nullptr;
  nvml_api::DeviceGetNvLinkState link_state = nullptr;
  nvml_api::DeviceGetNvLinkErrorCounter link_errors = nullptr;
  nvml_api::DeviceGetTemperature temperature = nullptr;
  nvml_api::DeviceGetTemperatureThreshold temperature_threshold = nullptr;
  nvml_api::DeviceGetClockInfo clock = nullptr, max_clock = nullptr;

  NvmlHealthLibrary() = default;
  NvmlHealthLibrary(const NvmlHealthLibrary&) = delete;
  NvmlHealthLibrary& operator=(const NvmlHealthLibrary&) = delete;
  ~NvmlHealthLibrary() {
    if (shutdown) shutdown();  // before the library closes, with its member
  }

  template <typename Fn>
  bool bind(Fn& fn, const char* symbol) {
    return library.bind(fn, symbol);
  }

  void bind_optional() {
    bind(driver_version, "nvmlSystemGetDriverVersion");
    bind(cuda_driver_version, "nvmlSystemGetCudaDriverVersion_v2");
    bind(pci_info, "nvmlDeviceGetPciInfo_v3");
    bind(name, "nvmlDeviceGetName");
    bind(uuid, "nvmlDeviceGetUUID");
    bind(persistence, "nvmlDeviceGetPersistenceMode");
    bind(ecc_mode, "nvmlDeviceGetEccMode");
    bind(ecc_errors, "nvmlDeviceGetTotalEccErrors");
    bind(retired_pending, "nvmlDeviceGetRetiredPagesPendingStatus");
    bind(remapped_rows, "nvmlDeviceGetRemappedRows");
    // A driver that drops the deprecated name still answers under the new one.
    if (!bind(throttle_reasons, "nvmlDeviceGetCurrentClocksEventReasons"))
      bind(throttle_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    bind(link_state, "nvmlDeviceGetNvLinkState");
    bind(link_errors, "nvmlDeviceGetNvLinkErrorCounter");
    bind(temperature, "nvmlDeviceGetTemperature");
    bind(temperature_threshold, "nvmlDeviceGetTemperatureThreshold");
    bind(clock, "nvmlDeviceGetClockInfo");
    bind(max_clock, "nvmlDeviceGetMaxClockInfo");
  }
};

// Our own words for NVML's codes: nvmlErrorString is not in every libnvidia-ml (nor the
// fake's), and the reports must read the same on every node.
std::string nvml_error_text(nvmlReturn_t code) {
  const char* text = "an NVML error";
  switch (code) {
    case 1: text = "NVML is not initialised"; break;
    case kInvalidArgument: text = "invalid argument"; break;
    case kNotSupported: text = "not supported"; break;
    case 4: text = "no permission"; break;
    case kNotFound: text = "not found"; break;
    case kInsufficientSize: text = "buffer too small"; break;
    case 8: text = "insufficient power (a power cable is not attached)"; break;
    case kDriverNotLoaded: text = "the NVIDIA driver is not loaded"; break;
    case 10: text = "timed out"; break;
    case 11: text = "interrupt issue"; break;
    case 14: text = "infoROM is corrupted"; break;
    case kGpuIsLost: text = "GPU is lost"; break;
    case 16: text = "GPU needs a reset"; break;
    case 17: text = "blocked by the operating system"; break;
    case 18: text = "driver and NVML versions do not match"; break;
    case 999: text = "unknown error"; break;
  }
  return fmt::format("{} (NVML error {})", text, code);
}

// Each reading is set only when NVML answered it: a failed call leaves it unknown.
void read_gpu(const NvmlHealthLibrary& nvml, nvmlDevice_t device, GpuHealthReading& gpu) {
  nvmlPciInfo_t pci = {};
  if (nvml.pci_info && nvml.pci_info(device, &pci) == kSuccess) {
    pci.busId[sizeof pci.busId - 1] = '\0';
    gpu.bus_id = normalise_bus_id(pci.busId);
  }
  char text[96] = {};  // NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE
  if (nvml.name && nvml.name(device, text, sizeof text) == kSuccess) gpu.name = text;
  text[0] = '\0';
  if (nvml.uuid && nvml.uuid(device, text, sizeof text) == kSuccess) gpu.uuid = text;

  int mode = 0, pending_mode = 0;
  if (nvml.persistence && nvml.persistence(device, &mode) == kSuccess)
    gpu.persistence_mode = mode == kFeatureEnabled;
  if (nvml.ecc_mode && nvml.ecc_mode(device, &mode, &pending_mode) == kSuccess)
    gpu.ecc_enabled = mode == kFeatureEnabled;
  unsigned long long count = 0;
  if (nvml.ecc_errors) {
    if (nvml.ecc_errors(device, kMemoryErrorUncorrected, kVolatileEcc, &count) == kSuccess)
      gpu.ecc_volatile_uncorrected = count;
    if (nvml.ecc_errors(device, kMemoryErrorUncorrected, kAggregateEcc, &count) == kSuccess)
      gpu.ecc_aggregate_uncorrected = count;
  }
  if (nvml.retired_pending && nvml.retired_pending(device, &mode) == kSuccess)
    gpu.retired_pages_pending = mode == kFeatureEnabled;
  unsigned corrected = 0, uncorrected = 0, pending = 0, failed = 0;
  if (nvml.remapped_rows &&
      nvml.remapped_rows(device, &corrected, &uncorrected, &pending, &failed) == kSuccess)
    gpu.row_remaps = RowRemapReading{corrected, uncorrected, pending != 0, failed != 0};
  unsigned long long reasons = 0;
  if (nvml.throttle_reasons && nvml.throttle_reasons(device, &reasons) == kSuccess)
    gpu.throttle_reasons = reasons;

  // NVML answers NOT_SUPPORTED (or another error) for link indices the GPU does not have.
  for (unsigned link = 0; nvml.link_state && link < kMaxLinks; ++link) {
    int active = 0;
    if (nvml.link_state(device, link, &active) != kSuccess) continue;
    NvLinkReading reading;
    reading.link = link;
    reading.active = active == kFeatureEnabled;
    if (nvml.link_errors) {
      auto counter = [&](int which, std::optional<std::uint64_t>& into) {
        unsigned long long value = 0;
        if (nvml.link_errors(device, link, which, &value) == kSuccess) into = value;
      };
      counter(kDlReplay, reading.replay);
      counter(kDlRecovery, reading.recovery);
      counter(kDlCrcFlit, reading.crc_flit);
      counter(kDlCrcData, reading.crc_data);
    }
    gpu.nvlinks.push_back(reading);
  }

  unsigned celsius = 0;
  if (nvml.temperature && nvml.temperature(device, kTemperatureGpu, &celsius) == kSuccess)
    gpu.temperature_c = celsius;
  if (nvml.temperature_threshold &&
      nvml.temperature_threshold(device, kTemperatureThresholdSlowdown, &celsius) == kSuccess)
    gpu.slowdown_temperature_c = celsius;
  unsigned mhz = 0;
  if (nvml.clock && nvml.clock(device, kClockSm, &mhz) == kSuccess) gpu.sm_clock_mhz = mhz;
  if (nvml.max_clock && nvml.max_clock(device, kClockSm, &mhz) == kSuccess) gpu.max_sm_clock_mhz = mhz;
}

// As NCCL finds its net plugin (src/plugin/net.cc): NCCL_NET_PLUGIN=aws names
// libnccl-net-aws.so, a name with a '/' or ".so" is taken as it is.
std::vector<std::string> net_plugin_names() {
  const char* env = std::getenv("NCCL_NET_PLUGIN");
  if (!env || !*env) return {"libnccl-net.so"};
  const std::string value = env;
  if (value.find('/') == std::string::npos && value.find(".so") == std::string::npos)
    return {"libnccl-net-" + value + ".so", value};
  return {value};
}

// A path is dlopen'ed as it is; a bare name is searched for as the rank's loader would.
void* open_library(const std::string& name, int flags) {
  if (name.find('/') != std::string::npos) return dlopen(name.c_str(), flags);
  return open_node_library(name.c_str(), flags);
}

class NodeGpuLibraries final : public GpuLibraries {
 public:
  std::optional<NvmlHealthReading> read_nvml(std::string& why_not) override;
  NcclReading read_nccl() override;
  std::optional<StressMeasurements> measure_stress(std::chrono::milliseconds budget, std::string& why_not) override {
    return measure_gpus_with_cuda(budget, why_not);
  }
  std::optional<NvmlAfterStress> read_after_stress(const std::vector<std::string>& bus_ids,
                                                   std::string& why_not) override {
    std::optional<NvmlFacts> facts = query_nvml(bus_ids, why_not);
    if (!facts) return std::nullopt;
    NvmlAfterStress after;
    after.nvlinks = std::move(facts->nvlinks);
    for (const auto& bus_id : bus_ids) {
      auto found = facts->by_bus_id.find(normalise_bus_id(bus_id));
      if (found == facts->by_bus_id.end()) after.clocks.emplace_back();
      else after.clocks.push_back(GpuClocksReading{found->second.throttle_reasons, found->second.sm_clock_mhz,
                                                   found->second.max_sm_clock_mhz});
    }
    return after;
  }
};

std::optional<NvmlHealthReading> NodeGpuLibraries::read_nvml(std::string& why_not) {
  NvmlHealthLibrary nvml;
  if (!nvml.library.loaded()) {
    why_not = "libnvidia-ml.so.1 did not load (no NVIDIA driver here)";
    return std::nullopt;
  }
  if (!nvml.bind(nvml.init, "nvmlInit_v2") || !nvml.bind(nvml.count, "nvmlDeviceGetCount_v2") ||
      !nvml.bind(nvml.by_index, "nvmlDeviceGetHandleByIndex_v2")) {
    why_not = "libnvidia-ml.so.1 lacks the functions muster uses (driver too old)";
    return std::nullopt;
  }
  if (const nvmlReturn_t code = nvml.init(); code != kSuccess) {
    why_not = "NVML did not initialise: " + nvml_error_text(code);
    return std::nullopt;
  }
  // Bound only now, so that a failed init is not shut down.
  nvml.bind(nvml.shutdown, "nvmlShutdown");
  nvml.bind_optional();

  NvmlHealthReading reading;
  if (const nvmlReturn_t code = nvml.count(&reading.device_count); code != kSuccess) {
    why_not = "NVML did not count the GPUs: " + nvml_error_text(code);
    return std::nullopt;
  }
  char version[kDriverVersionBufferSize] = {};
  if (nvml.driver_version && nvml.driver_version(version, sizeof version) == kSuccess)
    reading.driver_version = version;
  int cuda = 0;
  if (nvml.cuda_driver_version && nvml.cuda_driver_version(&cuda) == kSuccess)
    reading.cuda_driver_version = cuda;

  for (unsigned index = 0; index < reading.device_count; ++index) {
    GpuHealthReading gpu;
    gpu.index = index;
    nvmlDevice_t device = nullptr;
    if (const nvmlReturn_t code = nvml.by_index(index, &device); code != kSuccess) {
      gpu.error = nvml_error_text(code);
      gpu.error_code = code;
    } else {
      read_gpu(nvml, device, gpu);
    }
    reading.gpus.push_back(std::move(gpu));
  }
  return reading;
}

NcclReading NodeGpuLibraries::read_nccl() {
  NcclReading reading;
  // Lazy binding, as a rank loads it; closed again so that no NCCL stays in muster.
  if (const NodeLibrary nccl("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL); nccl.loaded()) {
    using GetVersion = int (*)(int*);  // ncclResult_t ncclGetVersion(int*); 0 is ncclSuccess
    GetVersion get_version = nullptr;
    int version = 0;
    if (!nccl.bind(get_version, "ncclGetVersion"))
      reading.why_not = "libnccl.so.2 has no ncclGetVersion";
    else if (const int code = get_version(&version); code != 0)
      reading.why_not = fmt::format("ncclGetVersion failed (NCCL error {})", code);
    else
      reading.version = version;
  } else {
    const char* error = dlerror();
    reading.why_not = fmt::format("libnccl.so.2 did not load: {}", error ? error : "not found");
  }
  for (const std::string& name : net_plugin_names())
    if (void* plugin = open_library(name, RTLD_LAZY | RTLD_LOCAL)) {
      reading.net_plugin = true;
      dlclose(plugin);
      break;
    }
  return reading;
}

}  // namespace

std::unique_ptr<GpuLibraries> node_gpu_libraries() {
  return std::make_unique<NodeGpuLibraries>();
}

std::string nccl_version_text(int code) {
  // NCCL_VERSION_CODE: major*1000+minor*100+patch up to 2.8, major*10000+minor*100+patch from
  // 2.9 (2.9.6 is 20906), so a code of five digits is the newer form.
  if (code >= 10000) return fmt::format("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100);
  return fmt::format("{}.{}.{}", code / 1000, code % 1000 / 100, code % 100);
}

std::string cuda_version_text(int code) {
  // CUDA_VERSION: major*1000 + minor*10.
  return fmt::format("{}.{}", code / 1000, code % 1000 / 10);
}

}  // namespace muster
