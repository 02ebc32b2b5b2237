// What the GPU stress tests measure on a node, as nvbandwidth and DCGM's diag levels 2-3 do:
// copies from pinned host memory to each GPU and back (each GPU alone, then all at once, since
// a shared PCIe switch shows only under load), a copy within each GPU (its HBM bandwidth),
// copies between every pair of GPUs, and an FP16/BF16 GEMM through cuBLAS. The numbers only:
// judging them is gpu_stress.cpp's. Every figure is set or says why it is not.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace muster {

// One measured figure: GB/s (10^9 bytes a second) or TFLOPS; unset with the reason when it
// could not be measured.
struct StressFigure {
  std::optional<double> value;
  std::string why_not;
};

struct GpuStressFigures {
  int device = 0;                  // the CUDA runtime's ordinal
  std::string bus_id;              // "0000:18:00.0", normalised
  StressFigure h2d, d2h;           // host to device and back, pinned memory, this GPU alone
  StressFigure h2d_all, d2h_all;   // the same with every GPU copying at once
  StressFigure hbm;                // a copy within the GPU, bytes read plus bytes written
  StressFigure gemm;               // TFLOPS of a BF16 GEMM (FP32 accumulate)
};

// A copy from one GPU's memory to another's, as the `from` GPU's stream issues it.
struct PeerStressFigure {
  size_t from = 0, to = 0;  // indices into StressMeasurements::gpus
  bool peer_access = false; // cudaDeviceCanAccessPeer said yes (else the copy is staged through the host)
  StressFigure gbps;
};

struct StressMeasurements {
  std::vector<GpuStressFigures> gpus;  // in the CUDA runtime's order
  std::vector<PeerStressFigure> peers; // every ordered pair
  double seconds = 0;                  // what measuring took
};

// Measures every GPU the CUDA runtime of this node shows this process (CUDA_VISIBLE_DEVICES
// narrows it, as for the job), within `budget`: figures not reached by then are unset and say
// so. nullopt, with `why_not`, when nothing can be measured (no CUDA runtime, no GPU).
// The CUDA runtime and cuBLAS are opened at run time, as NCCL is (gpu_measure.cpp).
std::optional<StressMeasurements> measure_gpus_with_cuda(std::chrono::milliseconds budget, std::string& why_not);

}  // namespace muster
