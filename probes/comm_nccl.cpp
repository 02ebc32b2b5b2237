#include "probes/comm_nccl.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "launcher/error.h"
#include "launcher/node_library.h"
#include "probes/nccl_api.h"

namespace muster {
namespace {

using namespace nccl_api;

struct Libraries {
  void* nccl = nullptr;
  void* cudart = nullptr;
  std::string why_not;
  nccl_api::GetUniqueId get_unique_id = nullptr;
  nccl_api::CommInitRank comm_init_rank = nullptr;
  nccl_api::CommInitRankConfig comm_init_rank_config = nullptr;  // null before NCCL 2.14
  nccl_api::CommAbort comm_abort = nullptr;
  nccl_api::CommDestroy comm_destroy = nullptr;
  nccl_api::CommGetAsyncError comm_async_error = nullptr;
  nccl_api::GetErrorString error_string = nullptr;
  nccl_api::AllReduce all_reduce = nullptr;
  nccl_api::AllGather all_gather = nullptr;
  nccl_api::ReduceScatter reduce_scatter = nullptr;
  nccl_api::Broadcast broadcast = nullptr;
  nccl_api::SetDevice set_device = nullptr;
  nccl_api::GetDeviceCount device_count = nullptr;
  nccl_api::Malloc malloc = nullptr;
  nccl_api::Free free = nullptr;
  nccl_api::Memcpy memcpy = nullptr;
  nccl_api::StreamCreate stream_create = nullptr;
  nccl_api::StreamDestroy stream_destroy = nullptr;
  nccl_api::StreamQuery stream_query = nullptr;
  nccl_api::EventCreateWithFlags event_create = nullptr;
  nccl_api::EventRecord event_record = nullptr;
  nccl_api::EventQuery event_query = nullptr;
  nccl_api::EventDestroy event_destroy = nullptr;
  nccl_api::CudaGetErrorString cuda_error_string = nullptr;

  template <typename Fn>
  bool bind(void* lib, Fn& fn, const char* symbol) {
    fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
    if (!fn && why_not.empty()) why_not = fmt::format("{} lacks {}", lib == nccl ? "libnccl.so.2" : "the CUDA runtime", symbol);
    return fn != nullptr;
  }
};

// Opened once per process; kept open for its lifetime (NCCL cannot be unloaded safely).
Libraries& libraries() {
  static Libraries libs = [] {
    Libraries l;
    l.cudart = open_node_library(kCudaRuntimeSonames, RTLD_NOW | RTLD_GLOBAL);
    if (!l.cudart) {
      l.why_not = "the CUDA runtime (libcudart.so) is not installed on this node; use --backend gloo";
      return l;
    }
    l.nccl = open_node_library("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    if (!l.nccl) {
      l.why_not = "libnccl.so.2 is not installed on this node; use --backend gloo";
      return l;
    }
    l.bind(l.cudart, l.set_device, "cudaSetDevice");
    l.bind(l.cudart, l.device_count, "cudaGetDeviceCount");
    l.bind(l.cudart, l.malloc, "cudaMalloc");
    l.bind(l.cudart, l.free, "cudaFree");
    l.bind(l.cudart, l.memcpy, "cudaMemcpy");
    l.bind(l.cudart, l.stream_create, "cudaStreamCreate");
    l.bind(l.cudart, l.stream_query, "cudaStreamQuery");
    l.bind(l.cudart, l.stream_destroy, "cudaStreamDestroy");
    l.bind(l.cudart, l.event_create, "cudaEventCreateWithFlags");
    l.bind(l.cudart, l.event_record, "cudaEventRecord");
    l.bind(l.cudart, l.event_query, "cudaEventQuery");
    l.bind(l.cudart, l.event_destroy, "cudaEventDestroy");
    l.bind(l.cudart, l.cuda_error_string, "cudaGetErrorString");
    l.bind(l.nccl, l.get_unique_id, "ncclGetUniqueId");
    l.bind(l.nccl, l.comm_init_rank, "ncclCommInitRank");
    // NCCL 2.14 and later: without it, a communicator is made blocking, with no time limit.
    l.comm_init_rank_config = reinterpret_cast<nccl_api::CommInitRankConfig>(dlsym(l.nccl, "ncclCommInitRankConfig"));
    l.bind(l.nccl, l.comm_abort, "ncclCommAbort");
    l.bind(l.nccl, l.comm_destroy, "ncclCommDestroy");
    l.bind(l.nccl, l.comm_async_error, "ncclCommGetAsyncError");
    l.bind(l.nccl, l.error_string, "ncclGetErrorString");
    l.bind(l.nccl, l.all_reduce, "ncclAllReduce");
    l.bind(l.nccl, l.all_gather, "ncclAllGather");
    l.bind(l.nccl, l.reduce_scatter, "ncclReduceScatter");
    l.bind(l.nccl, l.broadcast, "ncclBroadcast");
    if (l.why_not.empty()) {
      int devices = 0;
      cudaError_t rc = l.device_count(&devices);
      if (rc != 0 || devices == 0)
        l.why_not = fmt::format("no CUDA device here ({}); use --backend gloo",
                                rc != 0 ? l.cuda_error_string(rc) : "0 devices");
    }
    return l;
  }();
  return libs;
}

class NcclCollective : public Collective {
 public:
  NcclCollective(RendezvousClient& store, int rank, int size, int device,
                 std::chrono::milliseconds timeout, std::string name)
      : store_(store), rank_(rank), size_(size), device_(device), timeout_(timeout),
        name_(std::move(name)), libs_(libraries()) {
    check_cuda(libs_.set_device(device), "cudaSetDevice");
    // Until the constructor finishes, a failure must still give back what was made.
    std::unique_ptr<NcclCollective, void (*)(NcclCollective*)> constructed(
        this, [](NcclCollective* self) { self->release_all(); });
    check_cuda(libs_.stream_create(&stream_), "cudaStreamCreate");
    // Rank 0 of the group makes the unique id; the others fetch it from the rendezvous.
    ncclUniqueId id{};
    const std::string key = "nccl/" + name_ + "/id";
    if (rank == 0) {
      check_nccl(libs_.get_unique_id(&id), "ncclGetUniqueId");
      store.set(key, std::string(id.internal, sizeof id.internal));
    } else {
      std::string bytes = store.get(key, timeout);
      std::memcpy(id.internal, bytes.data(), std::min(bytes.size(), sizeof id.internal));
    }
    // Non-blocking, so that a group one of whose ranks never joins is given up on within the
    // timeout, rather than holding this rank in ncclCommInitRank for good.
    const std::string joining = fmt::format("ncclCommInitRank for {} (rank {} of {}, CUDA device {})",
                                            name_, rank, size, device);
    if (libs_.comm_init_rank_config) {
      ncclConfig_v21400 config = nonblocking_config();
      check_nccl(libs_.comm_init_rank_config(&comm_, size, id, rank, &config), joining.c_str());
      wait_for_communicator(joining);
    } else {
      check_nccl(libs_.comm_init_rank(&comm_, size, id, rank), joining.c_str());
    }
    constructed.release();
  }
  ~NcclCollective() override { release_all(); }

  std::string backend() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  float* allocate(size_t elements) override {
    void* p = nullptr;
    check_cuda(libs_.malloc(&p, std::max<size_t>(elements, 1) * sizeof(float)), "cudaMalloc");
    return static_cast<float*>(p);
  }
  void release(float* buffer) override {
    abort_if_broken();
    libs_.free(buffer);
  }
  void upload(float* buffer, const std::vector<float>& host) override {
    check_cuda(libs_.memcpy(buffer, host.data(), host.size() * sizeof(float), kMemcpyHostToDevice), "cudaMemcpy");
  }
  std::vector<float> download(const float* buffer, size_t elements) override {
    std::vector<float> host(elements);
    check_cuda(libs_.memcpy(host.data(), buffer, elements * sizeof(float), kMemcpyDeviceToHost), "cudaMemcpy");
    return host;
  }

  void run(CollectiveOp op, const float* send, float* recv, size_t count) override {
    enqueue(op, send, recv, count);
    wait_or_abort(op, Until::Finished);
  }
  // Back to back on the stream, one wait after the last. A wait after each measured an
  // 87 us floor under every collective on an H100 (a host that polls and sleeps, not the
  // GPU); nccl-tests waits once per timed loop for the same reason. An event after each
  // says when it ran, so that the timeout still bounds each collective, not the loop.
  void run_repeatedly(CollectiveOp op, const float* send, float* recv, size_t count, int times) override {
    while (events_.size() < size_t(times)) {
      cudaEvent_t event = nullptr;
      check_cuda(libs_.event_create(&event, kEventDisableTiming), "cudaEventCreateWithFlags");
      events_.push_back(event);
    }
    for (int i = 0; i < times; ++i) {
      enqueue(op, send, recv, count);
      // A non-blocking communicator takes no further call while one is still being enqueued,
      // and the event must follow the collective onto the stream.
      wait_or_abort(op, Until::Enqueued);
      check_cuda(libs_.event_record(events_[size_t(i)], stream_), "cudaEventRecord");
    }
    wait_or_abort(op, Until::EachFinished, times);
  }

  std::unique_ptr<Collective> subgroup(const std::string& name,
                                       const std::vector<int>& members) override {
    auto it = std::find(members.begin(), members.end(), rank_);
    if (it == members.end()) return nullptr;
    return std::make_unique<NcclCollective>(store_, int(it - members.begin()), int(members.size()),
                                            device_, timeout_, name_ + "/" + name);
  }

 private:
  void enqueue(CollectiveOp op, const float* send, float* recv, size_t count) {
    if (broken_ || !comm_) throw Error(ErrorKind::Runtime, "the NCCL communicator had already failed");
    switch (op) {
      case CollectiveOp::Barrier:  // NCCL has none: a one-element all-reduce is one
        if (!barrier_) barrier_ = allocate(1);
        check_nccl(libs_.all_reduce(barrier_, barrier_, 1, kFloat32, kSum, comm_, stream_), "barrier");
        break;
      case CollectiveOp::AllReduce:
        check_nccl(libs_.all_reduce(send, recv, count, kFloat32, kSum, comm_, stream_), "ncclAllReduce");
        break;
      case CollectiveOp::AllGather:
        check_nccl(libs_.all_gather(send, recv, count, kFloat32, comm_, stream_), "ncclAllGather");
        break;
      case CollectiveOp::ReduceScatter:
        check_nccl(libs_.reduce_scatter(send, recv, count, kFloat32, kSum, comm_, stream_), "ncclReduceScatter");
        break;
      case CollectiveOp::Broadcast:
        check_nccl(libs_.broadcast(send, recv, count, kFloat32, 0, comm_, stream_), "ncclBroadcast");
        break;
    }
  }

  // Waits for the non-blocking communicator's creation; aborts it when a rank of the group
  // does not join within the timeout.
  void wait_for_communicator(const std::string& joining) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      ncclResult_t state = kNcclInProgress;
      libs_.comm_async_error(comm_, &state);
      if (state == kNcclSuccess) return;
      if (state != kNcclInProgress) check_nccl(state, joining.c_str());
      if (std::chrono::steady_clock::now() > deadline) {
        abort_communicator();
        throw CollectiveTimedOut(fmt::format("{} did not finish within {} ms: a rank of the group "
                                             "never joined, or cannot reach this one; the NCCL "
                                             "communicator was aborted", joining, timeout_.count()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // NCCL work is asynchronous: a call on the non-blocking communicator may still be being
  // enqueued (ncclInProgress) when it returns, and then runs on the stream. Poll both, and
  // abort the communicator when the collective does not finish in time, so a missing peer
  // cannot hang the rank.
  // Until::Enqueued: the call is on the stream. Until::Finished: the stream ran it.
  // Until::EachFinished: the first `recorded` events fired, each restarting the timeout.
  enum class Until { Enqueued, Finished, EachFinished };
  void wait_or_abort(CollectiveOp op, Until until, int recorded = 0) {
    const auto started = std::chrono::steady_clock::now();
    auto deadline = started + timeout_;
    int fired = 0;
    for (;;) {
      ncclResult_t async = 0;
      libs_.comm_async_error(comm_, &async);
      if (async == kNcclSuccess && until == Until::Enqueued) return;
      if (async == kNcclSuccess) {  // enqueued: the stream says when it ran
        cudaError_t state = 0;
        if (until == Until::Finished) {
          state = libs_.stream_query(stream_);
        } else {
          while (fired < recorded && (state = libs_.event_query(events_[size_t(fired)])) == 0) {
            ++fired;
            deadline = std::chrono::steady_clock::now() + timeout_;
          }
        }
        if (state == 0) return;
        if (state != kCudaNotReady) {
          broken_ = true;  // aborted, not destroyed: a communicator after a CUDA error may not finish
          check_cuda(state, op_name(op));
        }
      }
      if (async != kNcclSuccess && async != kNcclInProgress) {
        broken_ = true;
        throw Error(ErrorKind::Runtime, fmt::format("{}: the NCCL communicator reported an "
                                                    "asynchronous error ({}) and was aborted",
                                                    op_name(op), libs_.error_string(async)));
      }
      if (std::chrono::steady_clock::now() > deadline) {
        abort_communicator();  // giving up on a peer tells the others nothing they need first
        throw CollectiveTimedOut(fmt::format("{} did not finish within {} ms; the NCCL "
                                             "communicator was aborted", op_name(op),
                                             timeout_.count()));
      }
      // Spun, not slept, while a collective may still be quick: any sleep lasts at least the
      // timer slack (50 us), which would be most of a small collective's measured time.
      if (std::chrono::steady_clock::now() - started < std::chrono::milliseconds(200))
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  // A communicator that failed is aborted only after the rank has said why (aborting it is
  // what tells its peers, who would otherwise report first and end the job before this
  // rank's own cause is heard), and before any buffer is freed: cudaFree waits for the
  // device, which a collective that hangs keeps busy until its communicator is aborted.
  void abort_if_broken() {
    if (broken_) abort_communicator();
  }
  void abort_communicator() {
    if (comm_) libs_.comm_abort(comm_);
    comm_ = nullptr;
  }
  void release_all() {
    abort_if_broken();
    if (comm_) libs_.comm_destroy(comm_);
    if (barrier_) libs_.free(barrier_);
    for (cudaEvent_t event : events_) libs_.event_destroy(event);
    events_.clear();
    if (stream_) libs_.stream_destroy(stream_);
    comm_ = nullptr;
    barrier_ = nullptr;
    stream_ = nullptr;
  }
  void check_cuda(cudaError_t rc, const char* what) const {
    if (rc != 0) throw Error(ErrorKind::Runtime, fmt::format("{}: {}", what, libs_.cuda_error_string(rc)));
  }
  // Success, or in progress on the non-blocking communicator, else the communicator fails.
  void check_nccl(ncclResult_t rc, const char* what) {
    if (rc != kNcclSuccess && rc != kNcclInProgress) {
      abort_communicator();
      throw Error(ErrorKind::Runtime, fmt::format("{}: {}", what, libs_.error_string(rc)));
    }
  }

  RendezvousClient& store_;
  int rank_, size_, device_;
  std::chrono::milliseconds timeout_;
  std::string name_;
  Libraries& libs_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* barrier_ = nullptr;
  std::vector<cudaEvent_t> events_;  // one after each collective of a timed loop
  bool broken_ = false;  // a collective failed or timed out: abort before freeing anything
};

}  // namespace

std::optional<std::string> nccl_unavailable_reason() {
  const Libraries& libs = libraries();
  if (libs.why_not.empty()) return std::nullopt;
  return libs.why_not;
}

std::unique_ptr<Collective> make_nccl_collective(RendezvousClient& store, int rank, int size,
                                                 int device, std::chrono::milliseconds timeout) {
  if (auto why = nccl_unavailable_reason()) throw Error(ErrorKind::Runtime, *why);
  return std::make_unique<NcclCollective>(store, rank, size, device, timeout, "world");
}


}  // namespace muster
