// The GPU stress tests' measurements through the node's CUDA runtime and cuBLAS, opened at run
// time as NCCL is. Each figure is timed by CUDA events around back-to-back copies (or GEMMs)
// on a stream of the GPU's own, as nvbandwidth and the CUDA samples' bandwidthTest time them:
// events measure the GPU's time, not this thread's. A first copy sizes the repetitions, so
// that each figure takes a few milliseconds whatever the GPU's rate, and the whole node stays
// within its budget.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>

#include <fmt/format.h>

#include "launcher/node_library.h"
#include "topology/health/cuda_api.h"
#include "topology/health/gpu_measurements.h"
#include "topology/nvml.h"

namespace muster {
namespace {

using namespace cuda_api;
using Clock = std::chrono::steady_clock;

constexpr size_t kCopyBytes = size_t(32) << 20;   // per host and peer copy
constexpr size_t kHbmBytes = size_t(64) << 20;    // per copy within a GPU
constexpr int kGemmSize = 8192;                   // m = n = k: about 1.1 TFLOP a GEMM
constexpr double kFigureMs = 5;                   // what each timed figure aims to take
constexpr int kMostRepetitions = 16;

// The CUDA runtime, opened once and kept for the process's life: a runtime with contexts
// cannot be unloaded safely (as NCCL's).
struct CudaRuntime {
  NodeLibrary library{kCudaRuntimeSonames, RTLD_NOW | RTLD_GLOBAL, NodeLibrary::Close::Never};
  std::string why_not;
  GetDeviceCount device_count = nullptr;
  SetDevice set_device = nullptr;
  DeviceGetPCIBusId bus_id = nullptr;
  Malloc malloc = nullptr;
  Free free = nullptr;
  MallocHost malloc_host = nullptr;
  FreeHost free_host = nullptr;
  MemcpyAsync memcpy_async = nullptr;
  MemcpyPeerAsync memcpy_peer_async = nullptr;
  DeviceCanAccessPeer can_access_peer = nullptr;
  DeviceEnablePeerAccess enable_peer_access = nullptr;
  StreamCreate stream_create = nullptr;
  StreamDestroy stream_destroy = nullptr;
  StreamSynchronize stream_synchronize = nullptr;
  EventCreateWithFlags event_create = nullptr;
  EventRecord event_record = nullptr;
  EventSynchronize event_synchronize = nullptr;
  EventElapsedTime elapsed = nullptr;
  EventDestroy event_destroy = nullptr;
  CudaGetErrorString error_string = nullptr;

  CudaRuntime() {
    if (!library.loaded()) {
      why_not = "the CUDA runtime (libcudart.so) is not installed on this node";
      return;
    }
    bind(device_count, "cudaGetDeviceCount");
    bind(set_device, "cudaSetDevice");
    bind(bus_id, "cudaDeviceGetPCIBusId");
    bind(malloc, "cudaMalloc");
    bind(free, "cudaFree");
    bind(malloc_host, "cudaMallocHost");
    bind(free_host, "cudaFreeHost");
    bind(memcpy_async, "cudaMemcpyAsync");
    bind(memcpy_peer_async, "cudaMemcpyPeerAsync");
    bind(can_access_peer, "cudaDeviceCanAccessPeer");
    bind(enable_peer_access, "cudaDeviceEnablePeerAccess");
    bind(stream_create, "cudaStreamCreate");
    bind(stream_destroy, "cudaStreamDestroy");
    bind(stream_synchronize, "cudaStreamSynchronize");
    bind(event_create, "cudaEventCreateWithFlags");
    bind(event_record, "cudaEventRecord");
    bind(event_synchronize, "cudaEventSynchronize");
    bind(elapsed, "cudaEventElapsedTime");
    bind(event_destroy, "cudaEventDestroy");
    bind(error_string, "cudaGetErrorString");
  }
  template <typename Fn>
  void bind(Fn& fn, const char* symbol) {
    if (!library.bind(fn, symbol) && why_not.empty()) why_not = fmt::format("the CUDA runtime lacks {} (too old)", symbol);
  }
  std::string error(const char* call, cudaError_t code) const {
    return fmt::format("{} failed: {} (CUDA error {})", call, error_string ? error_string(code) : "?", code);
  }
};

const CudaRuntime& cuda_runtime() {
  static const CudaRuntime runtime;
  return runtime;
}

// cuBLAS, opened after the runtime (whose instance it then shares), kept as the runtime is.
struct Cublas {
  NodeLibrary library{kCublasSonames, RTLD_NOW | RTLD_LOCAL, NodeLibrary::Close::Never};
  std::string why_not;
  CublasCreate create = nullptr;
  CublasDestroy destroy = nullptr;
  CublasSetStream set_stream = nullptr;
  CublasGemmEx gemm = nullptr;

  Cublas() {
    if (!library.loaded()) {
      why_not = "cuBLAS (libcublas.so) is not installed on this node";
      return;
    }
    if (!library.bind(create, "cublasCreate_v2") || !library.bind(destroy, "cublasDestroy_v2") ||
        !library.bind(set_stream, "cublasSetStream_v2") || !library.bind(gemm, "cublasGemmEx"))
      why_not = "cuBLAS lacks cublasGemmEx (too old)";
  }
};

const Cublas& cublas() {
  static const Cublas library;
  return library;
}

// A CUDA call's failure, carried to the figure it spoils.
struct CudaFailure {
  std::string what;
};

void check(const CudaRuntime& cuda, const char* call, cudaError_t code) {
  if (code != kCudaSuccess) throw CudaFailure{cuda.error(call, code)};
}

// One GPU's stream and buffers, freed with it.
struct GpuWork {
  const CudaRuntime& cuda;
  int device;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, end = nullptr;
  void* host = nullptr;                  // pinned
  void* copy = nullptr;                  // kCopyBytes, the target of host and peer copies
  void *hbm_from = nullptr, *hbm_to = nullptr;  // kHbmBytes each

  GpuWork(const CudaRuntime& c, int d) : cuda(c), device(d) {
    check(cuda, "cudaSetDevice", cuda.set_device(device));
    check(cuda, "cudaStreamCreate", cuda.stream_create(&stream));
    check(cuda, "cudaEventCreateWithFlags", cuda.event_create(&start, 0));
    check(cuda, "cudaEventCreateWithFlags", cuda.event_create(&end, 0));
    check(cuda, "cudaMallocHost", cuda.malloc_host(&host, kCopyBytes));
    check(cuda, "cudaMalloc", cuda.malloc(&copy, kCopyBytes));
    check(cuda, "cudaMalloc", cuda.malloc(&hbm_from, kHbmBytes));
    check(cuda, "cudaMalloc", cuda.malloc(&hbm_to, kHbmBytes));
  }
  ~GpuWork() {
    if (cuda.set_device(device) != kCudaSuccess) return;
    if (stream) cuda.stream_synchronize(stream);
    for (void* p : {copy, hbm_from, hbm_to})
      if (p) cuda.free(p);
    if (host) cuda.free_host(host);
    for (cudaEvent_t e : {start, end})
      if (e) cuda.event_destroy(e);
    if (stream) cuda.stream_destroy(stream);
  }
  GpuWork(const GpuWork&) = delete;
  GpuWork& operator=(const GpuWork&) = delete;

  // Records the start, `reps` rounds of `enqueue`, the end.
  void enqueue_timed(int reps, const std::function<void()>& enqueue) {
    check(cuda, "cudaSetDevice", cuda.set_device(device));
    check(cuda, "cudaEventRecord", cuda.event_record(start, stream));
    for (int i = 0; i < reps; ++i) enqueue();
    check(cuda, "cudaEventRecord", cuda.event_record(end, stream));
  }
  // The milliseconds between the events, once the end has fired.
  double elapsed_ms() {
    check(cuda, "cudaEventSynchronize", cuda.event_synchronize(end));
    float ms = 0;
    check(cuda, "cudaEventElapsedTime", cuda.elapsed(&ms, start, end));
    return ms;
  }
};

// A GPU's GEMM operands (n x n BF16 each) and cuBLAS handle on its stream, freed with it once
// the stream has finished with them.
struct GemmWork {
  const CudaRuntime& cuda;
  const Cublas& blas;
  GpuWork& gpu;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cublasHandle_t handle = nullptr;

  GemmWork(const CudaRuntime& r, const Cublas& l, GpuWork& w) : cuda(r), blas(l), gpu(w) {
    try {
      const size_t bytes = size_t(kGemmSize) * kGemmSize * 2;  // BF16
      check(cuda, "cudaSetDevice", cuda.set_device(gpu.device));
      check(cuda, "cudaMalloc", cuda.malloc(&a, bytes));
      check(cuda, "cudaMalloc", cuda.malloc(&b, bytes));
      check(cuda, "cudaMalloc", cuda.malloc(&c, bytes));
      if (const cublasStatus_t s = blas.create(&handle); s != kCublasSuccess)
        throw CudaFailure{fmt::format("cublasCreate failed (cuBLAS status {})", s)};
      if (const cublasStatus_t s = blas.set_stream(handle, gpu.stream); s != kCublasSuccess)
        throw CudaFailure{fmt::format("cublasSetStream failed (cuBLAS status {})", s)};
    } catch (const CudaFailure&) {
      release();  // a constructor that throws runs no destructor
      throw;
    }
  }
  ~GemmWork() { release(); }
  void release() {
    if (cuda.set_device(gpu.device) != kCudaSuccess) return;
    if (gpu.stream) cuda.stream_synchronize(gpu.stream);
    if (handle) blas.destroy(handle);
    for (void* p : {a, b, c})
      if (p) cuda.free(p);
  }
  GemmWork(const GemmWork&) = delete;
  GemmWork& operator=(const GemmWork&) = delete;
};

// What the node's measurement has left of its budget.
class Budget {
 public:
  explicit Budget(std::chrono::milliseconds whole) : deadline_(Clock::now() + whole), whole_(whole) {}
  bool spent() const { return Clock::now() >= deadline_; }
  std::string why_spent() const {
    return fmt::format("not measured: the node's budget of {:g} s was spent before it", whole_.count() / 1e3);
  }

 private:
  Clock::time_point deadline_;
  std::chrono::milliseconds whole_;
};

// Repetitions of work whose one round took `one_ms`, so that the figure takes about kFigureMs.
int repetitions(double one_ms) {
  if (!(one_ms > 0)) return kMostRepetitions;
  return std::clamp(int(std::lround(kFigureMs / one_ms)), 1, kMostRepetitions);
}

using Rate = std::function<double(double ms_per_round)>;

// The figure of `reps` rounds enqueued on `gpu`, once its end event has fired: what `rate`
// makes of the milliseconds a round.
StressFigure figure_of(GpuWork& gpu, int reps, const Rate& rate) {
  StressFigure figure;
  try {
    const double ms = gpu.elapsed_ms();
    if (ms > 0) figure.value = rate(ms / reps);
    else figure.why_not = "the CUDA events measured no time";
  } catch (const CudaFailure& f) {
    figure.why_not = f.what;
  }
  return figure;
}

// Times `enqueue` on `gpu`: one round to size, then the repetitions. Sets `reps_out` to what
// it ran.
StressFigure timed(GpuWork& gpu, const Budget& budget, const std::function<void()>& enqueue, const Rate& rate,
                   int* reps_out = nullptr) {
  StressFigure figure;
  if (budget.spent()) {
    figure.why_not = budget.why_spent();
    return figure;
  }
  int reps = 1;
  try {
    gpu.enqueue_timed(1, enqueue);
    reps = repetitions(gpu.elapsed_ms());
    gpu.enqueue_timed(reps, enqueue);
  } catch (const CudaFailure& f) {
    figure.why_not = f.what;
    return figure;
  }
  figure = figure_of(gpu, reps, rate);
  if (reps_out && figure.value) *reps_out = reps;
  return figure;
}

double gbps(size_t bytes, double ms) { return double(bytes) / (ms * 1e-3) / 1e9; }

}  // namespace

std::optional<StressMeasurements> measure_gpus_with_cuda(std::chrono::milliseconds whole, std::string& why_not) {
  const auto started = Clock::now();
  const CudaRuntime& cuda = cuda_runtime();
  if (!cuda.why_not.empty()) {
    why_not = cuda.why_not;
    return std::nullopt;
  }
  int count = 0;
  if (const cudaError_t code = cuda.device_count(&count); code != kCudaSuccess || count <= 0) {
    why_not = code != kCudaSuccess ? cuda.error("cudaGetDeviceCount", code) : "the CUDA runtime sees no GPU";
    return std::nullopt;
  }
  count = std::min(count, 64);  // a node's GPUs; bounds what is allocated below
  const Budget budget(whole);
  StressMeasurements out;
  std::vector<std::unique_ptr<GpuWork>> gpus;
  try {
    for (int d = 0; d < count; ++d) {
      GpuStressFigures g;
      g.device = d;
      char bus[32] = {};
      check(cuda, "cudaDeviceGetPCIBusId", cuda.bus_id(bus, sizeof bus, d));
      g.bus_id = normalise_bus_id(bus);
      out.gpus.push_back(g);
      gpus.push_back(std::make_unique<GpuWork>(cuda, d));
    }
  } catch (const CudaFailure& f) {
    why_not = "the GPUs could not be set up for the stress tests: " + f.what;
    return std::nullopt;
  }

  // A copy between the host and GPU `w` of kCopyBytes, `kind` its direction.
  auto host_copy = [&](GpuWork& w, int kind) {
    const bool to_device = kind == kMemcpyHostToDevice;
    return [&cuda, &w, kind, to_device] {
      check(cuda, "cudaMemcpyAsync",
            to_device ? cuda.memcpy_async(w.copy, w.host, kCopyBytes, kind, w.stream)
                      : cuda.memcpy_async(w.host, w.copy, kCopyBytes, kind, w.stream));
    };
  };
  auto per_round = [](size_t bytes) { return [bytes](double ms) { return gbps(bytes, ms); }; };

  // Each GPU alone: to it, from it, within it.
  std::vector<int> h2d_reps(size_t(count), 1), d2h_reps(size_t(count), 1);
  for (int d = 0; d < count; ++d) {
    GpuWork& w = *gpus[size_t(d)];
    GpuStressFigures& g = out.gpus[size_t(d)];
    g.h2d = timed(w, budget, host_copy(w, kMemcpyHostToDevice), per_round(kCopyBytes), &h2d_reps[size_t(d)]);
    g.d2h = timed(w, budget, host_copy(w, kMemcpyDeviceToHost), per_round(kCopyBytes), &d2h_reps[size_t(d)]);
    // A copy within the GPU reads and writes every byte, as bandwidthTest counts it.
    g.hbm = timed(w, budget, [&] {
      check(cuda, "cudaMemcpyAsync",
            cuda.memcpy_async(w.hbm_to, w.hbm_from, kHbmBytes, kMemcpyDeviceToDevice, w.stream));
    }, per_round(2 * kHbmBytes));
  }

  // Every GPU at once, each as many rounds as it ran alone: a PCIe switch shared by two GPUs
  // halves each only now. All are enqueued before any is read.
  for (int kind : {kMemcpyHostToDevice, kMemcpyDeviceToHost}) {
    const bool to_device = kind == kMemcpyHostToDevice;
    auto figure_at = [&](int d) -> StressFigure& {
      return to_device ? out.gpus[size_t(d)].h2d_all : out.gpus[size_t(d)].d2h_all;
    };
    if (budget.spent()) {
      for (int d = 0; d < count; ++d) figure_at(d).why_not = budget.why_spent();
      continue;
    }
    const std::vector<int>& reps = to_device ? h2d_reps : d2h_reps;
    std::vector<bool> enqueued(size_t(count), false);
    for (int d = 0; d < count; ++d) {
      GpuWork& w = *gpus[size_t(d)];
      try {
        w.enqueue_timed(reps[size_t(d)], host_copy(w, kind));
        enqueued[size_t(d)] = true;
      } catch (const CudaFailure& f) {
        figure_at(d).why_not = f.what;
      }
    }
    for (int d = 0; d < count; ++d)
      if (enqueued[size_t(d)]) figure_at(d) = figure_of(*gpus[size_t(d)], reps[size_t(d)], per_round(kCopyBytes));
  }

  // Every ordered pair, from the source's stream, with peer access on where the GPUs allow it.
  for (int from = 0; from < count; ++from)
    for (int to = 0; to < count; ++to) {
      if (from == to) continue;
      PeerStressFigure p;
      p.from = size_t(from);
      p.to = size_t(to);
      int can = 0;
      if (cuda.can_access_peer(&can, from, to) == kCudaSuccess && can) {
        cuda.set_device(from);
        const cudaError_t code = cuda.enable_peer_access(to, 0);
        p.peer_access = code == kCudaSuccess || code == kPeerAccessAlreadyEnabled;
      }
      GpuWork &a = *gpus[size_t(from)], &b = *gpus[size_t(to)];
      p.gbps = timed(a, budget, [&] {
        check(cuda, "cudaMemcpyPeerAsync", cuda.memcpy_peer_async(b.copy, to, a.copy, from, kCopyBytes, a.stream));
      }, per_round(kCopyBytes));
      out.peers.push_back(p);
    }

  // The GEMM last: the clocks NVML reads next are those it ran at.
  const Cublas& blas = cublas();
  for (int d = 0; d < count; ++d) {
    StressFigure& figure = out.gpus[size_t(d)].gemm;
    if (!blas.why_not.empty()) {
      figure.why_not = blas.why_not;
      continue;
    }
    // Before three 128 MiB buffers and a cuBLAS handle are made for nothing.
    if (budget.spent()) {
      figure.why_not = budget.why_spent();
      continue;
    }
    GpuWork& w = *gpus[size_t(d)];
    try {
      const GemmWork gemm(cuda, blas, w);
      const float one = 1, zero = 0;
      const int n = kGemmSize;
      figure = timed(w, budget, [&] {
        const cublasStatus_t s = blas.gemm(gemm.handle, kCublasOpN, kCublasOpN, n, n, n, &one, gemm.a, kDataBf16, n,
                                           gemm.b, kDataBf16, n, &zero, gemm.c, kDataBf16, n, kComputeF32, kGemmDefault);
        if (s != kCublasSuccess) throw CudaFailure{fmt::format("cublasGemmEx failed (cuBLAS status {})", s)};
      }, [](double ms) { return 2.0 * kGemmSize * double(kGemmSize) * kGemmSize / (ms * 1e-3) / 1e12; });
    } catch (const CudaFailure& f) {
      figure.why_not = f.what;
    }
  }
  gpus.clear();
  out.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return out;
}

}  // namespace muster
