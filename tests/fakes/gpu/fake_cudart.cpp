// A fake CUDA runtime (libcudart.so.13), compiled against the real cuda_runtime_api.h so
// that every signature, type and error code is the real ABI's. Devices are the GPUs of the
// machine description (fake_machine.h); device and pinned memory are host memory; every
// stream has a worker thread that runs its work asynchronously, as a GPU does: work enqueued
// returns at once, cudaStreamQuery (and an event recorded after it) says cudaErrorNotReady
// until it has run, and MUSTER_FAKE_CUDA_KERNEL_US makes each kernel take that long. A timer
// that stops before the stream is synchronised therefore measures nothing, and a test can
// tell. CUDA_VISIBLE_DEVICES narrows and renumbers the devices as it does for the real runtime.
//
// Async copies of more than 128 KiB move their ends only (copy_ends).
// Each stream also keeps a clock of the time its work would take on the GPUs described: a
// copy advances it by its bytes over the rate of its path (h2d, d2h, hbm, p2p lines; pageable
// host memory and peers without peer access at half the rate, as a staged copy goes), a
// GEMM by its FLOPs over the GPU's rate (fake_cublas.cpp). cudaEventElapsedTime reports the
// time between two events on that clock, so that figures are exact and the tests never
// depend on this machine's speed; the time between events of two streams is not modelled.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "tests/fakes/gpu/fake_machine.h"

struct CUstream_st {
  int device = 0;  // the device current when it was made
  std::mutex mutex;
  std::condition_variable changed;
  struct Work {
    std::function<void(double clock_s)> run;  // given the stream's clock as it starts
    bool is_kernel;  // takes MUSTER_FAKE_CUDA_KERNEL_US; an event's mark takes no time
    double seconds = 0;  // what it would take on the GPU described
  };
  std::deque<Work> work;
  bool busy = false;
  bool stopping = false;
  double clock_s = 0;  // the work's time so far, on the GPUs described
  std::thread worker;

  CUstream_st() {
    const char* kernel_us = std::getenv("MUSTER_FAKE_CUDA_KERNEL_US");
    const auto kernel = std::chrono::microseconds(kernel_us ? std::atol(kernel_us) : 0);
    worker = std::thread([this, kernel] {
      std::unique_lock lock(mutex);
      for (;;) {
        changed.wait(lock, [&] { return stopping || !work.empty(); });
        if (work.empty()) break;
        auto next = std::move(work.front());
        work.pop_front();
        busy = true;
        lock.unlock();
        if (next.is_kernel) std::this_thread::sleep_for(kernel);
        next.run(clock_s);  // only this thread writes the clock
        lock.lock();
        clock_s += next.seconds;
        busy = false;
        changed.notify_all();
      }
      lock.unlock();
      delete this;  // destroyed, and its last work done
    });
  }
  // As the real runtime: the call returns at once, and the stream goes once its work is done.
  void destroy() {
    worker.detach();
    std::lock_guard lock(mutex);  // the worker cannot delete the stream before this unlocks
    stopping = true;
    changed.notify_all();
  }
  void enqueue(Work w) {
    {
      std::lock_guard lock(mutex);
      work.push_back(std::move(w));
    }
    changed.notify_all();
  }
  bool idle() {
    std::lock_guard lock(mutex);
    return work.empty() && !busy;
  }
  void wait_idle() {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return work.empty() && !busy; });
  }
};

// Where an event was recorded: fired once the work before it ran, at that stream's clock.
struct EventMark {
  std::atomic<bool> fired{true};  // never recorded: fired, as a new real event reports cudaSuccess
  std::atomic<double> at_s{0};
  const CUstream_st* stream = nullptr;  // null: never recorded
};

struct CUevent_st {
  std::shared_ptr<EventMark> mark = std::make_shared<EventMark>();
  unsigned flags = 0;
};

namespace {

std::mutex g_mutex;
struct DeviceAllocation {
  size_t size;
  int device;  // the ordinal current when it was made
};
std::map<const void*, DeviceAllocation> g_device_memory;  // allocations, by start
std::map<const void*, size_t> g_pinned_memory;            // cudaMallocHost's, by start
std::set<std::pair<int, int>> g_peer_access;              // (device, peer) enabled
std::set<cudaStream_t> g_streams;
thread_local int g_device = 0;

// The machine's GPUs this process may use, as the real runtime reads CUDA_VISIBLE_DEVICES:
// ordinals (bus order, the machines' order, read as strtoul reads them) or, for a list that
// begins with "GPU-", UUID prefixes; the list ends at the first word that names no device,
// and a device named twice hides them all. Unset: every GPU.
const std::vector<size_t>& visible_devices() {
  static const std::vector<size_t> visible = [] {
    const auto& gpus = muster::fake_gpu::machine();
    std::vector<size_t> out;
    const char* list = std::getenv("CUDA_VISIBLE_DEVICES");
    if (!list) {
      for (size_t i = 0; i < gpus.size(); ++i) out.push_back(i);
      return out;
    }
    const std::string text = list;
    const bool uuids = text.rfind("GPU-", 0) == 0;
    for (size_t start = 0; start <= text.size();) {
      size_t end = text.find(',', start);
      if (end == std::string::npos) end = text.size();
      std::string word = text.substr(start, end - start);
      start = end + 1;
      std::optional<size_t> gpu;
      if (uuids) {
        if (word.rfind("GPU-", 0) != 0) break;
        for (size_t i = 0; i < gpus.size(); ++i)
          if (gpus[i].uuid.rfind(word, 0) == 0) gpu = i;
      } else {
        char* after = nullptr;
        const long n = std::strtol(word.c_str(), &after, 10);
        if (after != word.c_str() && n >= 0 && size_t(n) < gpus.size()) gpu = size_t(n);
      }
      if (!gpu) break;
      if (std::find(out.begin(), out.end(), *gpu) != out.end()) return std::vector<size_t>{};
      out.push_back(*gpu);
    }
    return out;
  }();
  return visible;
}

int device_count() { return int(visible_devices().size()); }

// Whether [p, p+size) lies within one allocation of `allocations`.
template <typename Allocations, typename SizeOf>
const typename Allocations::mapped_type* within(const Allocations& allocations, const void* p, size_t size,
                                                SizeOf size_of) {
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return nullptr;
  --it;
  auto start = static_cast<const char*>(it->first);
  if (static_cast<const char*>(p) >= start && static_cast<const char*>(p) + size <= start + size_of(it->second))
    return &it->second;
  return nullptr;
}

// The device whose allocation `p` points into, or -1.
int device_of(const void* p, size_t size) {
  std::lock_guard lock(g_mutex);
  const auto* a = within(g_device_memory, p, size, [](const DeviceAllocation& d) { return d.size; });
  return a ? a->device : -1;
}

bool on_device(const void* p, size_t size) { return device_of(p, size) >= 0; }

bool pinned(const void* p, size_t size) {
  std::lock_guard lock(g_mutex);
  return within(g_pinned_memory, p, size, [](size_t n) { return n; }) != nullptr;
}

const muster::fake_gpu::Gpu& gpu_at(int device) {
  return muster::fake_gpu::machine()[visible_devices()[size_t(device)]];
}

bool peer_access(int device, int peer) {
  std::lock_guard lock(g_mutex);
  return g_peer_access.count({device, peer}) > 0;
}

// An async copy moves every byte up to 128 KiB, and beyond that its first and last 64 KiB:
// the stress tests copy what a GPU copies in milliseconds, tens of gigabytes, which this
// machine's memory could not in the time a test has. A test that reads a copy back reads its ends.
void copy_ends(void* dst, const void* src, size_t count) {
  constexpr size_t kEnd = 64 << 10;
  if (count <= 2 * kEnd) {
    std::memcpy(dst, src, count);
    return;
  }
  std::memcpy(dst, src, kEnd);
  std::memcpy(static_cast<char*>(dst) + count - kEnd, static_cast<const char*>(src) + count - kEnd, kEnd);
}

double seconds_at(size_t bytes, double gbps) { return gbps > 0 ? double(bytes) / (gbps * 1e9) : 0; }

// cudaMemcpy waits for all work on the current device's blocking streams, as the legacy
// default stream does (another device is another context, and is not waited for).
void synchronise_device(int device) {
  std::vector<cudaStream_t> streams;
  {
    std::lock_guard lock(g_mutex);
    for (auto* s : g_streams)
      if (s->device == device) streams.push_back(s);
  }
  for (auto* s : streams) s->wait_idle();
}

}  // namespace

extern "C" {

// How fake NCCL puts a collective on a stream: `run(arg)` runs on the stream's worker.
int muster_fake_cuda_enqueue(cudaStream_t stream, void (*run)(void*), void* arg) {
  if (!stream) return cudaErrorInvalidResourceHandle;
  stream->enqueue({[run, arg](double) { run(arg); }, true, 0});
  return cudaSuccess;
}

// How fake cuBLAS puts a kernel on a stream: it takes `seconds` on the stream's clock.
int muster_fake_cuda_enqueue_kernel(cudaStream_t stream, double seconds) {
  if (!stream) return cudaErrorInvalidResourceHandle;
  stream->enqueue({[](double) {}, true, seconds});
  return cudaSuccess;
}

// The ordinal of the device whose memory holds [p, p+size), or -1 (for fake cuBLAS).
int muster_fake_cuda_device_of(const void* p, size_t size) { return device_of(p, size); }

// The described GPU of a device ordinal: its GEMM rate (for fake cuBLAS); 0 for no device.
double muster_fake_cuda_gemm_tflops(int device) {
  return device >= 0 && device < device_count() ? gpu_at(device).gemm_tflops : 0;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return cudaErrorInvalidValue;
  *count = device_count();
  return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
  g_device = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int length, int device) {
  if (!bus_id || length <= 0 || device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
  const std::string& id = muster::fake_gpu::machine()[visible_devices()[size_t(device)]].bus_id;
  std::snprintf(bus_id, size_t(length), "%s", id.c_str());
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return cudaErrorInvalidValue;
  *device = g_device;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t size) {
  if (!p) return cudaErrorInvalidValue;
  *p = std::calloc(1, size ? size : 1);
  if (!*p) return cudaErrorMemoryAllocation;
  std::lock_guard lock(g_mutex);
  g_device_memory[*p] = {size, g_device};
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t size) {
  if (!p) return cudaErrorInvalidValue;
  *p = std::calloc(1, size ? size : 1);
  if (!*p) return cudaErrorMemoryAllocation;
  std::lock_guard lock(g_mutex);
  g_pinned_memory[*p] = size;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  {
    std::lock_guard lock(g_mutex);
    if (!g_pinned_memory.erase(p)) return cudaErrorInvalidValue;
  }
  std::free(p);
  return cudaSuccess;
}

// As the real one, cudaFree first waits for the device: memory a kernel still uses is never
// freed under it (and a hung kernel makes cudaFree hang, until its work is aborted).
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  synchronise_device(g_device);
  {
    std::lock_guard lock(g_mutex);
    if (!g_device_memory.erase(p)) return cudaErrorInvalidValue;
  }
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyDefault &&
      ((dst_device && !on_device(dst, count)) || (src_device && !on_device(src, count))))
    return cudaErrorInvalidValue;  // a host pointer where the kind says device, or the reverse
  synchronise_device(g_device);
  std::memcpy(dst, src, count);
  return cudaSuccess;
}

// An async copy runs on its stream's worker and takes the time of its path: host to device
// or back at the GPU's h2d/d2h rate (half from pageable memory, which the driver stages),
// within one GPU at its HBM rate for the bytes read and written, between two at their p2p
// rate. The legacy default stream (0) copies at once, as cudaMemcpy.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) {
  const int dst_device = device_of(dst, count), src_device = device_of(src, count);
  if (kind == cudaMemcpyDefault)
    kind = dst_device >= 0 ? (src_device >= 0 ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                           : (src_device >= 0 ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  const bool to_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool from_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if ((to_device && dst_device < 0) || (from_device && src_device < 0) || kind > cudaMemcpyDefault)
    return cudaErrorInvalidValue;
  if (!stream) return cudaMemcpy(dst, src, count, kind);
  double seconds = 0;
  if (kind == cudaMemcpyHostToDevice)
    seconds = seconds_at(count, gpu_at(dst_device).h2d_gbps) * (pinned(src, count) ? 1 : 2);
  else if (kind == cudaMemcpyDeviceToHost)
    seconds = seconds_at(count, gpu_at(src_device).d2h_gbps) * (pinned(dst, count) ? 1 : 2);
  else if (kind == cudaMemcpyDeviceToDevice && dst_device == src_device)
    seconds = seconds_at(2 * count, gpu_at(dst_device).hbm_gbps);
  else if (kind == cudaMemcpyDeviceToDevice)
    seconds = seconds_at(count, muster::fake_gpu::p2p_gbps(gpu_at(src_device), gpu_at(dst_device))) *
              (peer_access(src_device, dst_device) || peer_access(dst_device, src_device) ? 1 : 2);
  stream->enqueue({[dst, src, count](double) { copy_ends(dst, src, count); }, false, seconds});
  return cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                                cudaStream_t stream) {
  if (dst_device < 0 || dst_device >= device_count() || src_device < 0 || src_device >= device_count())
    return cudaErrorInvalidDevice;
  if (device_of(dst, count) != dst_device || device_of(src, count) != src_device) return cudaErrorInvalidValue;
  return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
}

cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer) {
  if (!can_access) return cudaErrorInvalidValue;
  if (device < 0 || device >= device_count() || peer < 0 || peer >= device_count()) return cudaErrorInvalidDevice;
  *can_access = device != peer;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  if (flags != 0) return cudaErrorInvalidValue;
  if (peer < 0 || peer >= device_count() || peer == g_device) return cudaErrorInvalidDevice;
  std::lock_guard lock(g_mutex);
  if (!g_peer_access.insert({g_device, peer}).second) return cudaErrorPeerAccessAlreadyEnabled;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  if (!stream) return cudaErrorInvalidValue;
  *stream = new CUstream_st;
  (*stream)->device = g_device;
  std::lock_guard lock(g_mutex);
  g_streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  {
    std::lock_guard lock(g_mutex);
    if (!g_streams.erase(stream)) return cudaErrorInvalidResourceHandle;
  }
  stream->destroy();
  return cudaSuccess;
}

// Events fire when the stream's work before them has run, as the real ones do.
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (!event || (flags & ~unsigned(cudaEventBlockingSync | cudaEventDisableTiming))) return cudaErrorInvalidValue;
  *event = new CUevent_st;
  (*event)->flags = flags;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event || !stream) return cudaErrorInvalidResourceHandle;
  auto mark = std::make_shared<EventMark>();
  mark->fired = false;
  mark->stream = stream;
  event->mark = mark;  // a later record replaces an earlier one, as cudaEventRecord's does
  stream->enqueue({[mark](double clock_s) {
                     mark->at_s = clock_s;
                     mark->fired = true;
                   },
                   false, 0});
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  return event->mark->fired ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  const auto mark = event->mark;
  while (!mark->fired) std::this_thread::sleep_for(std::chrono::microseconds(50));
  return cudaSuccess;
}

// As the real one: both events recorded, fired, and made without cudaEventDisableTiming.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return cudaErrorInvalidValue;
  if (!start || !end || (start->flags | end->flags) & cudaEventDisableTiming) return cudaErrorInvalidResourceHandle;
  const auto a = start->mark, b = end->mark;
  if (!a->stream || !b->stream) return cudaErrorInvalidResourceHandle;
  if (!a->fired || !b->fired) return cudaErrorNotReady;
  if (a->stream != b->stream) return cudaErrorNotSupported;  // the fake keeps one clock per stream
  *ms = float((b->at_s - a->at_s) * 1e3);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  delete event;  // a mark still queued holds its flag, not the event
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (!stream) return cudaErrorInvalidResourceHandle;
  return stream->idle() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!stream) return cudaErrorInvalidResourceHandle;
  stream->wait_idle();
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  synchronise_device(g_device);
  return cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}

}  // extern "C"
