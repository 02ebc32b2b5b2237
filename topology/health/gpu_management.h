// What the GPU libraries of a node say about its GPUs' health and its GPU software: NVML
// (libnvidia-ml.so.1) and NCCL (libnccl.so.2), both opened at run time as muster does
// everywhere, so that a node without them still runs every other check. The health checks
// read through this seam; unit tests hand them a recording fake, end-to-end tests the fake
// libnvidia-ml of tests/fakes/gpu through the real ABI.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "topology/health/gpu_measurements.h"

namespace muster {

// One NVLink of a GPU that NVML says the GPU has (links it answers NOT_SUPPORTED for are
// left out), with its error counters where NVML gives them.
struct NvLinkReading {
  unsigned link = 0;
  bool active = false;
  std::optional<std::uint64_t> replay, recovery, crc_flit, crc_data;
};

// Row remapping (A100 and later): rows remapped for corrected and uncorrected errors, and
// whether a remap waits for a GPU reset (pending) or could not be made (failed).
struct RowRemapReading {
  unsigned corrected = 0, uncorrected = 0;
  bool pending = false, failed = false;
};

// What NVML says about one GPU; an unset field is one NVML did not answer (not supported
// on this GPU, or an error), which the checks report as unknown, never as healthy.
struct GpuHealthReading {
  unsigned index = 0;   // NVML's index
  std::string bus_id;   // "0000:18:00.0", normalised
  std::string name, uuid;
  std::string error;    // set when NVML could not open the GPU at all ("GPU is lost (NVML error 15)")
  int error_code = 0;   // NVML's code for it: 15 lost, 4 no permission (hidden by a cgroup)
  std::optional<bool> persistence_mode;
  std::optional<bool> ecc_enabled;  // the current ECC mode
  std::optional<std::uint64_t> ecc_volatile_uncorrected, ecc_aggregate_uncorrected;
  std::optional<bool> retired_pages_pending;
  std::optional<RowRemapReading> row_remaps;
  std::optional<std::uint64_t> throttle_reasons;  // nvmlClocksThrottleReason* bits
  std::vector<NvLinkReading> nvlinks;
  std::optional<unsigned> temperature_c, slowdown_temperature_c;
  std::optional<unsigned> sm_clock_mhz, max_sm_clock_mhz;  // the SM clock now, and its most
};

inline constexpr int kNvmlNoPermission = 4;  // NVML_ERROR_NO_PERMISSION

// nvmlClocksThrottleReason* bits, as NVML's documentation gives them.
namespace throttle {
inline constexpr std::uint64_t kGpuIdle = 0x1;
inline constexpr std::uint64_t kApplicationsClocksSetting = 0x2;
inline constexpr std::uint64_t kSwPowerCap = 0x4;
inline constexpr std::uint64_t kHwSlowdown = 0x8;
inline constexpr std::uint64_t kSyncBoost = 0x10;
inline constexpr std::uint64_t kSwThermalSlowdown = 0x20;
inline constexpr std::uint64_t kHwThermalSlowdown = 0x40;
inline constexpr std::uint64_t kHwPowerBrakeSlowdown = 0x80;
inline constexpr std::uint64_t kDisplayClockSetting = 0x100;
}  // namespace throttle

// Everything NVML answered, once NVML initialised.
struct NvmlHealthReading {
  std::string driver_version;             // "550.54.15"; empty when not answered
  std::optional<int> cuda_driver_version; // 12040 for CUDA 12.4
  unsigned device_count = 0;              // what nvmlDeviceGetCount_v2 said
  std::vector<GpuHealthReading> gpus;     // one per index NVML counts, by index
};

// What the NCCL a rank would load says of itself.
struct NcclReading {
  std::optional<int> version;  // ncclGetVersion: 22105 for 2.21.5; unset when not loadable
  std::string why_not;         // why NCCL could not be asked, when it could not
  bool net_plugin = false;     // an NCCL net plugin (NCCL_NET_PLUGIN, else libnccl-net.so) loads
};

// What NVML says of the measured GPUs right after the stress measurement, in one reading:
// each one's clocks then and what held them down, and the NVLinks between each pair.
struct GpuClocksReading {
  std::optional<std::uint64_t> throttle_reasons;  // nvmlClocksThrottleReason* bits
  std::optional<unsigned> sm_clock_mhz, max_sm_clock_mhz;
};
struct NvmlAfterStress {
  std::vector<std::optional<GpuClocksReading>> clocks;  // by the bus ids asked, in order; unset: not found
  std::vector<std::vector<int>> nvlinks;                // [i][j] NVLinks between GPUs i and j
};

class GpuLibraries {
 public:
  virtual ~GpuLibraries() = default;
  // NVML's answers; nullopt with the reason in `why_not` when libnvidia-ml.so.1 does not
  // load or NVML does not initialise.
  virtual std::optional<NvmlHealthReading> read_nvml(std::string& why_not) = 0;
  virtual NcclReading read_nccl() = 0;
  // The GPUs under load (gpu_measurements.h), within `budget`; nullopt with the reason when
  // nothing could be measured. A reader that cannot measure (a snapshot's) says so.
  virtual std::optional<StressMeasurements> measure_stress(std::chrono::milliseconds budget, std::string& why_not) {
    (void)budget;
    why_not = "the GPUs are not measured here";
    return std::nullopt;
  }
  // NvmlAfterStress of the GPUs with these bus ids; nullopt with the reason when NVML does
  // not answer.
  virtual std::optional<NvmlAfterStress> read_after_stress(const std::vector<std::string>& bus_ids,
                                                           std::string& why_not) {
    (void)bus_ids;
    why_not = "NVML is not asked here";
    return std::nullopt;
  }
};

// The node's own libraries, found as open_node_library finds them.
std::unique_ptr<GpuLibraries> node_gpu_libraries();

// "22105" -> "2.21.5" (NCCL's version code); "12040" -> "12.4" (CUDA's).
std::string nccl_version_text(int code);
std::string cuda_version_text(int code);

}  // namespace muster
