// The NVML declarations muster uses, as NVML's documentation gives them: nvml.h is not
// installed on CPU-only machines (nor here), and muster must build there, opening
// libnvidia-ml.so.1 at run time. The fake NVML of the tests is built from these too.
#pragma once

namespace muster::nvml_api {

using nvmlReturn_t = int;                       // enum nvmlReturn_enum
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kSuccess = 0;            // NVML_SUCCESS
constexpr nvmlReturn_t kInvalidArgument = 2;    // NVML_ERROR_INVALID_ARGUMENT
constexpr nvmlReturn_t kNotFound = 6;           // NVML_ERROR_NOT_FOUND
constexpr nvmlReturn_t kDriverNotLoaded = 9;    // NVML_ERROR_DRIVER_NOT_LOADED
constexpr nvmlReturn_t kInsufficientSize = 7;   // NVML_ERROR_INSUFFICIENT_SIZE
constexpr unsigned kMaxLinks = 18;              // NVML_NVLINK_MAX_LINKS

// nvmlPciInfo_t as of NVML 11 (the _v2 and _v3 entry points).
struct nvmlPciInfo_t {
  char busIdLegacy[16];                         // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];                               // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
};

// nvmlIntNvLinkDeviceType_t: what is at the other end of an NVLink.
enum NvLinkDeviceType : int { kLinkToGpu = 0, kLinkToIbmNpu = 1, kLinkToSwitch = 2, kLinkToUnknown = 0xFF };

using Init = nvmlReturn_t (*)();
using Shutdown = nvmlReturn_t (*)();
using DeviceGetHandleByPciBusId = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
using DeviceGetName = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned);
using DeviceGetUUID = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned);
using DeviceGetNvLinkState = nvmlReturn_t (*)(nvmlDevice_t, unsigned link, int* is_active);
using DeviceGetNvLinkRemotePciInfo = nvmlReturn_t (*)(nvmlDevice_t, unsigned link, nvmlPciInfo_t*);
using DeviceGetNvLinkRemoteDeviceType = nvmlReturn_t (*)(nvmlDevice_t, unsigned link, int* type);

}  // namespace muster::nvml_api
