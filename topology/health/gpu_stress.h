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

#include "topology/health/health.h"

namespace muster {

// A GPU's PCIe link now and the best it can train at.
struct StressLink {
  int width = 0, max_width = 0;
  double speed_gts = 0, max_speed_gts = 0;
};

// What is known of the measured GPUs besides their figures, index for index.
struct StressContext {
  std::vector<std::optional<GpuHealthReading>> nvml;  // read right after the measurement; unset: not answered
  std::vector<std::optional<StressLink>> links;       // unset: sysfs did not say
  std::vector<std::vector<int>> nvlinks;              // [i][j] NVLinks between GPUs i and j; empty: unknown
  StressSettings settings;
};

// The findings: per GPU "gpu_host_copy", "gpu_memory_bandwidth" and "gpu_gemm", per pair of
// GPUs "gpu_peer_copy", with every figure in their values.
std::vector<HealthFinding> judge_gpu_stress(const StressMeasurements& measured, const StressContext& context);

// GB/s a PCIe link of this generation's speed and width carries each way (128b/130b from
// Gen3, 8b/10b before): 16 GT/s x16 -> 31.5.
double pcie_gbps(double speed_gts, int width);
// GB/s one NVLink carries each way for a GPU of this name: 50 for Blackwell, 25 before.
double nvlink_gbps(const std::string& gpu_name);

}  // namespace muster
