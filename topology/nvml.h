// NVIDIA's management library, loaded at run time so that muster needs no CUDA to build
// or start: GPU names, UUIDs and NVLink counts when libnvidia-ml.so.1 is there.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace muster {

struct NvmlGpuFacts {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  std::string uuid;  // "GPU-..."
  // Its clocks when asked, and what holds them down (nvmlClocksThrottleReason* bits); unset:
  // NVML did not answer.
  std::optional<std::uint64_t> throttle_reasons;
  std::optional<unsigned> sm_clock_mhz, max_sm_clock_mhz;
};

struct NvmlFacts {
  std::map<std::string, NvmlGpuFacts> by_bus_id;   // "0000:03:00.0" -> facts
  std::vector<std::vector<int>> nvlinks;           // [i][j] for the GPUs asked about
  std::vector<std::pair<int, int>> cpu_links;      // (GPU i, NVLinks to a CPU), when any
};

// Asks NVML about the GPUs with these bus ids (in this order). Returns nullopt, with the
// reason in `why_not`, when the library does not load or does not answer.
std::optional<NvmlFacts> query_nvml(const std::vector<std::string>& gpu_bus_ids,
                                    std::string& why_not);

// "00000000:3B:00.0" (NVML) or "0000:3b:00.0" -> "0000:3b:00.0".
std::string normalise_bus_id(const std::string& bus_id);

}  // namespace muster
