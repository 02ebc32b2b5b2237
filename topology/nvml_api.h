// The NVML declarations muster uses, as NVML's documentation gives them: nvml.h is not
// installed on CPU-only machines (nor here), and muster must build there, opening
// libnvidia-ml.so.1 at run time. The fake NVML of the tests is built from these too.
#pragma once

namespace muster::nvml_api {

using nvmlReturn_t = int;                       // enum nvmlReturn_enum
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kSuccess = 0;            // NVML_SUCCESS
constexpr nvmlReturn_t kInvalidArgument = 2;    // NVML_ERROR_INVALID_ARGUMENT
constexpr nvmlReturn_t kNotSupported = 3;       // NVML_ERROR_NOT_SUPPORTED
constexpr nvmlReturn_t kNotFound = 6;           // NVML_ERROR_NOT_FOUND
constexpr nvmlReturn_t kDriverNotLoaded = 9;    // NVML_ERROR_DRIVER_NOT_LOADED
constexpr nvmlReturn_t kInsufficientSize = 7;   // NVML_ERROR_INSUFFICIENT_SIZE
constexpr nvmlReturn_t kGpuIsLost = 15;         // NVML_ERROR_GPU_IS_LOST
constexpr unsigned kMaxLinks = 18;              // NVML_NVLINK_MAX_LINKS

// nvmlPciInfo_t as of NVML 11 (the _v2 and _v3 entry points).
struct nvmlPciInfo_t {
  char busIdLegacy[16];                         // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];                               // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
};

// nvmlIntNvLinkDeviceType_t: what is at the other end of an NVLink.
enum NvLinkDeviceType : int { kLinkToGpu = 0, kLinkToIbmNpu = 1, kLinkToSwitch = 2, kLinkToUnknown = 0xFF };

// Arguments of the health readings (nvmlEnableState_t is 0 disabled, 1 enabled).
constexpr int kFeatureEnabled = 1;              // NVML_FEATURE_ENABLED
constexpr int kMemoryErrorUncorrected = 1;      // NVML_MEMORY_ERROR_TYPE_UNCORRECTED
constexpr int kVolatileEcc = 0;                 // NVML_VOLATILE_ECC: since the driver loaded
constexpr int kAggregateEcc = 1;                // NVML_AGGREGATE_ECC: over the GPU's life
constexpr int kTemperatureGpu = 0;              // NVML_TEMPERATURE_GPU
constexpr int kTemperatureThresholdSlowdown = 1;  // NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
// nvmlNvLinkErrorCounter_t.
enum NvLinkErrorCounter : int { kDlReplay = 0, kDlRecovery = 1, kDlCrcFlit = 2, kDlCrcData = 3 };
constexpr unsigned kDriverVersionBufferSize = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

using Init = nvmlReturn_t (*)();
using Shutdown = nvmlReturn_t (*)();
using DeviceGetHandleByPciBusId = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
using DeviceGetName = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned);
using DeviceGetUUID = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned);
using DeviceGetNvLinkState = nvmlReturn_t (*)(nvmlDevice_t, unsigned link, int* is_active);
using DeviceGetNvLinkRemotePciInfo = nvmlReturn_t (*)(nvmlDevice_t, unsigned link, nvmlPciInfo_t*);
using DeviceGetNvLinkRemoteDeviceType = nvmlReturn_t (*)(nvmlDevice_t, unsigned link, int* type);

using SystemGetDriverVersion = nvmlReturn_t (*)(char* version, unsigned length);
using SystemGetCudaDriverVersion = nvmlReturn_t (*)(int* version);  // _v2
using DeviceGetCount = nvmlReturn_t (*)(unsigned* count);           // _v2
using DeviceGetHandleByIndex = nvmlReturn_t (*)(unsigned index, nvmlDevice_t*);  // _v2
using DeviceGetPciInfo = nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*);        // _v3
using DeviceGetPersistenceMode = nvmlReturn_t (*)(nvmlDevice_t, int* mode);
using DeviceGetEccMode = nvmlReturn_t (*)(nvmlDevice_t, int* current, int* pending);
using DeviceGetTotalEccErrors = nvmlReturn_t (*)(nvmlDevice_t, int error_type, int counter_type,
                                                 unsigned long long* count);
using DeviceGetRetiredPagesPendingStatus = nvmlReturn_t (*)(nvmlDevice_t, int* is_pending);
using DeviceGetRemappedRows = nvmlReturn_t (*)(nvmlDevice_t, unsigned* corrected,
                                               unsigned* uncorrected, unsigned* is_pending,
                                               unsigned* failure_occurred);
// Also nvmlDeviceGetCurrentClocksEventReasons, the newer name (the old one is deprecated
// in NVML 13.0): the same signature and bits.
using DeviceGetCurrentClocksThrottleReasons = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long* reasons);
using DeviceGetNvLinkErrorCounter = nvmlReturn_t (*)(nvmlDevice_t, unsigned link, int counter,
                                                     unsigned long long* value);
using DeviceGetTemperature = nvmlReturn_t (*)(nvmlDevice_t, int sensor, unsigned* celsius);
using DeviceGetTemperatureThreshold = nvmlReturn_t (*)(nvmlDevice_t, int threshold, unsigned* celsius);
// nvmlDeviceGetClockInfo (now) and nvmlDeviceGetMaxClockInfo; `type` an nvmlClockType_t.
constexpr int kClockSm = 1;                     // NVML_CLOCK_SM
using DeviceGetClockInfo = nvmlReturn_t (*)(nvmlDevice_t, int type, unsigned* mhz);

}  // namespace muster::nvml_api
