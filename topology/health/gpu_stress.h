// Judging the GPU stress tests' figures (gpu_measurements.h), as an operator replacing GPUs
// would: each figure against the GPU's peers on the node (GPUs of its model; for a copy
// between two GPUs, pairs with as many NVLinks) and against what its hardware implies (the
// PCIe link for copies to and from the host, the NVLinks for copies between GPUs). A figure
// below a bar fails, naming the GPU (index, bus id, UUID) or the pair, the figure, the bar and
// the likely cause read at that moment: a throttle reason, clocks held down, a PCIe link
// trained below its maximum. A figure not measured, or with nothing to compare it with, is
// unknown, never a pass. Exposed for the unit tests.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "topology/health/checks.h"
#include "topology/health/health.h"

namespace muster {

// A GPU's PCIe link now and the best it can train at.
struct StressLink {
  health::PcieLinkRate now, best;
};

// What is known of the measured GPUs besides their figures, index for index.
struct StressContext {
  std::vector<std::optional<GpuHealthReading>> nvml;  // read right after the measurement; unset: not answered
  std::vector<std::optional<StressLink>> links;       // unset: sysfs did not say
  std::vector<std::vector<int>> nvlinks;              // [i][j] NVLinks between GPUs i and j; empty: unknown
  StressSettings settings;
};

// A figure the stress tests put in a finding's values: the check, its key, and how the
// findings word it ("H2D 12.0 GB/s").
struct StressFigureKey {
  const char* check;
  const char* key;
  const char* what;
  const char* unit;
};
inline constexpr StressFigureKey kStressH2d{"gpu_host_copy", "h2d_gigabytes_per_second", "H2D", "GB/s"};
inline constexpr StressFigureKey kStressD2h{"gpu_host_copy", "d2h_gigabytes_per_second", "D2H", "GB/s"};
inline constexpr StressFigureKey kStressH2dAll{"gpu_host_copy", "h2d_all_gigabytes_per_second",
                                               "H2D with all GPUs at once", "GB/s"};
inline constexpr StressFigureKey kStressD2hAll{"gpu_host_copy", "d2h_all_gigabytes_per_second",
                                               "D2H with all GPUs at once", "GB/s"};
inline constexpr StressFigureKey kStressHbm{"gpu_memory_bandwidth", "hbm_gigabytes_per_second", "copy within the GPU",
                                            "GB/s"};
inline constexpr StressFigureKey kStressGemm{"gpu_gemm", "gemm_teraflops", "BF16 GEMM", "TFLOPS"};
inline constexpr StressFigureKey kStressPeerForward{"gpu_peer_copy", "forward_gigabytes_per_second",
                                                    "copy from the first GPU to the second", "GB/s"};
inline constexpr StressFigureKey kStressPeerBackward{"gpu_peer_copy", "backward_gigabytes_per_second",
                                                     "copy from the second GPU to the first", "GB/s"};
inline constexpr StressFigureKey kStressFigures[] = {kStressH2d, kStressD2h,  kStressH2dAll,      kStressD2hAll,
                                                     kStressHbm, kStressGemm, kStressPeerForward, kStressPeerBackward};
// The value key of a pair's NVLink count, which groups pairs of one kind.
inline constexpr const char* kStressNvlinksKey = "nvlinks";

// "H2D 12.0 GB/s": a figure as the findings word it.
std::string stress_figure_text(const char* what, const char* unit, double value);

// The findings: per GPU "gpu_host_copy", "gpu_memory_bandwidth" and "gpu_gemm", per pair of
// GPUs "gpu_peer_copy", with every figure in their values (kStressFigures) and the GPUs'
// model.
std::vector<HealthFinding> judge_gpu_stress(const StressMeasurements& measured, const StressContext& context);

// GB/s a PCIe link of this generation's speed and width carries each way (128b/130b from
// Gen3, 8b/10b before): 16 GT/s x16 -> 31.5.
double pcie_gbps(double speed_gts, int width);
// GB/s one NVLink carries each way for a GPU of this name: 50 for Blackwell, 25 before.
double nvlink_gbps(const std::string& gpu_name);

}  // namespace muster
