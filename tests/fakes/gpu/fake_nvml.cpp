// A fake libnvidia-ml.so.1: NVML's entry points that muster calls, answering from the
// machine description (fake_machine.h). nvml.h is not installed here, so the declarations
// are muster's own (topology/nvml_api.h), taken from NVML's documentation.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <type_traits>

#include "tests/fakes/gpu/fake_machine.h"
#include "topology/nvml_api.h"

using namespace muster::nvml_api;
using muster::fake_gpu::Gpu;
using muster::fake_gpu::Link;
using muster::fake_gpu::machine;

namespace {

bool initialised = false;

const Gpu* gpu_of(nvmlDevice_t device) { return reinterpret_cast<const Gpu*>(device); }

nvmlReturn_t copy_text(const std::string& text, char* out, unsigned size) {
  if (!out || text.size() + 1 > size) return kInsufficientSize;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return kSuccess;
}

// The NVLink at this index, when the GPU has one there and it is active.
const Link* link_of(nvmlDevice_t device, unsigned link) {
  const Gpu* g = gpu_of(device);
  return g && g->link_active(link) ? &g->links[link] : nullptr;
}

nvmlDevice_t handle_of(const Gpu& g) { return reinterpret_cast<nvmlDevice_t>(const_cast<Gpu*>(&g)); }

int enable_state(bool enabled) { return enabled ? kFeatureEnabled : 0; }

}  // namespace

extern "C" {

nvmlReturn_t nvmlInit_v2() {
  if (machine().empty()) return kDriverNotLoaded;  // no GPU: as a machine without the driver
  initialised = true;
  return kSuccess;
}

nvmlReturn_t nvmlShutdown() {
  initialised = false;
  return kSuccess;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned length) {
  return copy_text(muster::fake_gpu::driver().version, version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  if (!version) return kInvalidArgument;
  *version = muster::fake_gpu::driver().cuda_version;
  return kSuccess;
}

// A lost GPU is counted, as the real NVML counts it, but cannot be opened.
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  if (!initialised) return kDriverNotLoaded;
  if (!count) return kInvalidArgument;
  *count = unsigned(machine().size());
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
  if (!initialised) return kDriverNotLoaded;
  if (!device || index >= machine().size()) return kInvalidArgument;
  if (machine()[index].lost) return kGpuIsLost;
  while (machine()[index].hangs) std::this_thread::sleep_for(std::chrono::hours(1));  // a wedged GPU
  *device = handle_of(machine()[index]);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* device) {
  if (!initialised) return kDriverNotLoaded;
  if (!bus_id || !device) return kInvalidArgument;
  for (const Gpu& g : machine())
    if (g.bus_id == muster::fake_gpu::canonical_bus_id(bus_id)) {
      if (g.lost) return kGpuIsLost;
      *device = handle_of(g);
      return kSuccess;
    }
  return kNotFound;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  const Gpu* g = gpu_of(device);
  if (!g || !pci) return kInvalidArgument;
  std::memset(pci, 0, sizeof *pci);
  unsigned domain = 0, bus = 0, dev = 0, function = 0;
  std::sscanf(g->bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &function);
  pci->domain = domain;
  pci->bus = bus;
  pci->device = dev;
  // NVML writes an 8-digit domain and upper-case hex digits.
  std::snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", domain, bus, dev, function);
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", domain, bus, dev,
                function);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
  return gpu_of(device) ? copy_text(gpu_of(device)->name, name, length) : kInvalidArgument;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
  return gpu_of(device) ? copy_text(gpu_of(device)->uuid, uuid, length) : kInvalidArgument;
}

// As the real NVML: a link index the GPU does not have is not supported, one it has answers
// whether the link is up.
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned link, int* is_active) {
  if (!gpu_of(device) || link >= kMaxLinks || !is_active) return kInvalidArgument;
  if (link >= gpu_of(device)->link_count()) return kNotSupported;
  *is_active = enable_state(link_of(device, link) != nullptr);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned link, int counter,
                                             unsigned long long* value) {
  const Gpu* g = gpu_of(device);
  if (!g || link >= kMaxLinks || counter < kDlReplay || counter > kDlCrcData || !value)
    return kInvalidArgument;
  if (link >= g->link_count()) return kNotSupported;
  auto errors = g->link_errors.find(link);
  *value = errors == g->link_errors.end() ? 0 : errors->second[counter];
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned link, nvmlPciInfo_t* pci) {
  const Link* l = link_of(device, link);
  if (!l || !pci) return kInvalidArgument;
  std::memset(pci, 0, sizeof *pci);
  // NVML writes an 8-digit domain; switches and CPUs get bus ids of their own.
  const std::string bus = l->to == Link::To::Gpu ? "0000" + l->peer_bus_id
                          : l->to == Link::To::Switch ? "00000000:c0:00.0" : "00000000:00:01.0";
  std::snprintf(pci->busId, sizeof pci->busId, "%s", bus.c_str());
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", bus.c_str() + 4);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned link, int* type) {
  const Link* l = link_of(device, link);
  if (!l || !type) return kInvalidArgument;
  *type = l->to == Link::To::Gpu ? kLinkToGpu : l->to == Link::To::Switch ? kLinkToSwitch : kLinkToIbmNpu;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int* mode) {
  if (!gpu_of(device) || !mode) return kInvalidArgument;
  *mode = enable_state(gpu_of(device)->persistence);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, int* current, int* pending) {
  if (!gpu_of(device) || !current || !pending) return kInvalidArgument;
  *current = *pending = enable_state(gpu_of(device)->ecc_enabled);
  return kSuccess;
}

// With ECC off there are no counts to give: NVML answers NOT_SUPPORTED.
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type, int counter_type,
                                         unsigned long long* count) {
  const Gpu* g = gpu_of(device);
  if (!g || !count || (counter_type != kVolatileEcc && counter_type != kAggregateEcc))
    return kInvalidArgument;
  if (!g->ecc_enabled) return kNotSupported;
  if (error_type != kMemoryErrorUncorrected) *count = 0;  // corrected errors: none described
  else *count = counter_type == kVolatileEcc ? g->ecc_volatile_uncorrected : g->ecc_aggregate_uncorrected;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int* is_pending) {
  if (!gpu_of(device) || !is_pending) return kInvalidArgument;
  *is_pending = enable_state(gpu_of(device)->retired_pages_pending);
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned* corrected, unsigned* uncorrected,
                                       unsigned* is_pending, unsigned* failure_occurred) {
  const Gpu* g = gpu_of(device);
  if (!g || !corrected || !uncorrected || !is_pending || !failure_occurred) return kInvalidArgument;
  *corrected = g->remap_corrected;
  *uncorrected = g->remap_uncorrected;
  *is_pending = g->remap_pending;
  *failure_occurred = g->remap_failed;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long* reasons) {
  if (!gpu_of(device) || !reasons) return kInvalidArgument;
  *reasons = gpu_of(device)->throttle_reasons;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned* mhz) {
  if (!gpu_of(device) || !mhz) return kInvalidArgument;
  if (type != kClockSm) return kNotSupported;  // only the SM clock is described
  *mhz = gpu_of(device)->sm_clock_mhz;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, int type, unsigned* mhz) {
  if (!gpu_of(device) || !mhz) return kInvalidArgument;
  if (type != kClockSm) return kNotSupported;
  *mhz = gpu_of(device)->max_sm_clock_mhz;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned* celsius) {
  if (!gpu_of(device) || sensor != kTemperatureGpu || !celsius) return kInvalidArgument;
  *celsius = gpu_of(device)->temperature_c;
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, int threshold, unsigned* celsius) {
  if (!gpu_of(device) || !celsius) return kInvalidArgument;
  if (threshold != kTemperatureThresholdSlowdown) return kNotSupported;  // only the one described
  *celsius = gpu_of(device)->slowdown_temperature_c;
  return kSuccess;
}

}  // extern "C"

// Each entry point has the type muster calls it through (topology/nvml_api.h).
template <typename Fn, typename Declared>
constexpr bool declared_as = std::is_same_v<Fn, Declared>;
static_assert(declared_as<decltype(&nvmlInit_v2), Init>);
static_assert(declared_as<decltype(&nvmlShutdown), Shutdown>);
static_assert(declared_as<decltype(&nvmlSystemGetDriverVersion), SystemGetDriverVersion>);
static_assert(declared_as<decltype(&nvmlSystemGetCudaDriverVersion_v2), SystemGetCudaDriverVersion>);
static_assert(declared_as<decltype(&nvmlDeviceGetCount_v2), DeviceGetCount>);
static_assert(declared_as<decltype(&nvmlDeviceGetHandleByIndex_v2), DeviceGetHandleByIndex>);
static_assert(declared_as<decltype(&nvmlDeviceGetHandleByPciBusId_v2), DeviceGetHandleByPciBusId>);
static_assert(declared_as<decltype(&nvmlDeviceGetPciInfo_v3), DeviceGetPciInfo>);
static_assert(declared_as<decltype(&nvmlDeviceGetName), DeviceGetName>);
static_assert(declared_as<decltype(&nvmlDeviceGetUUID), DeviceGetUUID>);
static_assert(declared_as<decltype(&nvmlDeviceGetNvLinkState), DeviceGetNvLinkState>);
static_assert(declared_as<decltype(&nvmlDeviceGetNvLinkRemotePciInfo_v2), DeviceGetNvLinkRemotePciInfo>);
static_assert(declared_as<decltype(&nvmlDeviceGetNvLinkRemoteDeviceType), DeviceGetNvLinkRemoteDeviceType>);
static_assert(declared_as<decltype(&nvmlDeviceGetNvLinkErrorCounter), DeviceGetNvLinkErrorCounter>);
static_assert(declared_as<decltype(&nvmlDeviceGetPersistenceMode), DeviceGetPersistenceMode>);
static_assert(declared_as<decltype(&nvmlDeviceGetEccMode), DeviceGetEccMode>);
static_assert(declared_as<decltype(&nvmlDeviceGetTotalEccErrors), DeviceGetTotalEccErrors>);
static_assert(declared_as<decltype(&nvmlDeviceGetRetiredPagesPendingStatus), DeviceGetRetiredPagesPendingStatus>);
static_assert(declared_as<decltype(&nvmlDeviceGetRemappedRows), DeviceGetRemappedRows>);
static_assert(declared_as<decltype(&nvmlDeviceGetCurrentClocksThrottleReasons), DeviceGetCurrentClocksThrottleReasons>);
static_assert(declared_as<decltype(&nvmlDeviceGetTemperature), DeviceGetTemperature>);
static_assert(declared_as<decltype(&nvmlDeviceGetTemperatureThreshold), DeviceGetTemperatureThreshold>);
static_assert(declared_as<decltype(&nvmlDeviceGetClockInfo), DeviceGetClockInfo>);
static_assert(declared_as<decltype(&nvmlDeviceGetMaxClockInfo), DeviceGetClockInfo>);
