// A fake CUDA runtime (libcudart.so.13), compiled against the real cuda_runtime_api.h so
// that every signature, type and error code is the real ABI's. Devices are the GPUs of the
// machine description (fake_machine.h); device memory is host memory; every stream has a
// worker thread that runs its work asynchronously, as a GPU does: work enqueued returns at
// once, cudaStreamQuery (and an event recorded after it) says cudaErrorNotReady until it has
// run, and MUSTER_FAKE_CUDA_KERNEL_US makes each piece of work take that long. A timer that
// stops before the stream is synchronised therefore measures nothing, and a test can tell. CUDA_VISIBLE_DEVICES narrows and
// renumbers the devices as it does for the real runtime.
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
    std::function<void()> run;
    bool is_kernel;  // takes MUSTER_FAKE_CUDA_KERNEL_US; an event's mark takes no time
  };
  std::deque<Work> work;
  bool busy = false;
  bool stopping = false;
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
        next.run();
        lock.lock();
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
  bool idle() {
    std::lock_guard lock(mutex);
    return work.empty() && !busy;
  }
  void wait_idle() {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return work.empty() && !busy; });
  }
};

// Never recorded: fired, as a new real event reports cudaSuccess.
struct CUevent_st {
  std::shared_ptr<std::atomic<bool>> fired = std::make_shared<std::atomic<bool>>(true);
};

namespace {

std::mutex g_mutex;
std::map<const void*, size_t> g_device_memory;  // allocations, by start
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

// The allocation `p` points into, if any.
bool on_device(const void* p, size_t size) {
  std::lock_guard lock(g_mutex);
  auto it = g_device_memory.upper_bound(p);
  if (it == g_device_memory.begin()) return false;
  --it;
  auto start = static_cast<const char*>(it->first);
  return static_cast<const char*>(p) >= start && static_cast<const char*>(p) + size <= start + it->second;
}

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
  {
    std::lock_guard lock(stream->mutex);
    stream->work.push_back({[run, arg] { run(arg); }, true});
  }
  stream->changed.notify_all();
  return cudaSuccess;
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
  g_device_memory[*p] = size;
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
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event || !stream) return cudaErrorInvalidResourceHandle;
  auto fired = std::make_shared<std::atomic<bool>>(false);
  event->fired = fired;  // a later record replaces an earlier one, as cudaEventRecord's does
  {
    std::lock_guard lock(stream->mutex);
    stream->work.push_back({[fired] { *fired = true; }, false});
  }
  stream->changed.notify_all();
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  return *event->fired ? cudaSuccess : cudaErrorNotReady;
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
    default: return "unknown error";
  }
}

}  // extern "C"
