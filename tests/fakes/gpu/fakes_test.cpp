// The fakes' own behaviour, through the real nccl.h and cuda_runtime_api.h: a fake that
// always succeeded would prove nothing about the code that runs against it. Collectives run
// between threads here (one communicator each); between processes and machines, the
// end-to-end tests run them under muster.
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/fakes/gpu/fake_machine.h"
#include "tests/support/build_paths.h"

using muster::testing::source_path;

namespace {

using Clock = std::chrono::steady_clock;

// Every test here sees the four-GPU machine; the description is read on first use.
const bool machine_chosen = [] {
  setenv("MUSTER_FAKE_GPU_MACHINE", source_path("/tests/fakes/gpu/machines/four-gpus-pairwise.txt").c_str(), 1);
  return true;
}();

// Sets an environment variable for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

// A device buffer holding `values`.
float* on_device(const std::vector<float>& values) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, values.size() * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  return static_cast<float*>(p);
}

std::vector<float> from_device(const float* p, size_t n) {
  std::vector<float> out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

// A communicator of one rank, for what needs no peers.
ncclComm_t lone_comm() {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  return comm;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(FakeCuda, DevicesAreTheGpusOfTheMachineDescription) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 4);
  EXPECT_EQ(cudaSetDevice(3), cudaSuccess);
  EXPECT_EQ(cudaSetDevice(4), cudaErrorInvalidDevice);
  int device = -1;
  cudaGetDevice(&device);
  EXPECT_EQ(device, 3);
}

TEST(FakeCuda, MemcpyRefusesAHostPointerWhereTheKindSaysDevice) {
  std::vector<float> host(4, 1.0f), other(4);
  EXPECT_EQ(cudaMemcpy(other.data(), host.data(), sizeof(float) * 4, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  float* device = on_device(host);
  EXPECT_EQ(from_device(device, 4), host);
  EXPECT_EQ(cudaFree(device), cudaSuccess);
  EXPECT_EQ(cudaFree(device), cudaErrorInvalidValue);  // freed twice
}

// The property a benchmark's timer depends on: the call returns before the work is done.
TEST(FakeCuda, StreamWorkCompletesLaterOnItsOwnThread) {
  // A kernel long enough that a busy machine cannot blur "returned at once" with "waited".
  ScopedEnv slow("MUSTER_FAKE_CUDA_KERNEL_US", "2000000");
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ncclComm_t comm = lone_comm();
  float* send = on_device({1, 2, 3});
  float* recv = on_device({0, 0, 0});

  auto start = Clock::now();
  ASSERT_EQ(ncclAllReduce(send, recv, 3, ncclFloat32, ncclSum, comm, stream), ncclSuccess);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1000)) << "the call waited for the work";
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(2000));
  EXPECT_EQ(cudaStreamQuery(stream), cudaSuccess);
  EXPECT_EQ(from_device(recv, 3), (std::vector<float>{1, 2, 3}));

  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  cudaFree(send);
  cudaFree(recv);
}

// Three ranks, one thread each, every collective muster runs, checked element by element.
TEST(FakeNccl, CollectivesBetweenRanksGiveExactResults) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 1000;  // elements per rank
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::vector<float>> all_reduce(kRanks), all_gather(kRanks), reduce_scatter(kRanks),
      broadcast(kRanks);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kRanks; ++rank)
    ranks.emplace_back([&, rank] {
      cudaSetDevice(rank);
      cudaStream_t stream = nullptr;
      cudaStreamCreate(&stream);
      ncclComm_t comm = nullptr;
      ASSERT_EQ(ncclCommInitRank(&comm, kRanks, id, rank), ncclSuccess);
      std::vector<float> mine(kCount * kRanks);
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = float(rank * 10000 + int(i));
      float* send = on_device(mine);
      float* recv = on_device(std::vector<float>(kCount * kRanks, -1));
      auto run = [&](ncclResult_t issued, size_t elements) {
        EXPECT_EQ(issued, ncclSuccess);
        EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        return from_device(recv, elements);
      };
      all_reduce[size_t(rank)] = run(ncclAllReduce(send, recv, kCount, ncclFloat32, ncclSum, comm, stream), kCount);
      all_gather[size_t(rank)] = run(ncclAllGather(send, recv, kCount, ncclFloat32, comm, stream), kCount * kRanks);
      reduce_scatter[size_t(rank)] =
          run(ncclReduceScatter(send, recv, kCount, ncclFloat32, ncclSum, comm, stream), kCount);
      broadcast[size_t(rank)] = run(ncclBroadcast(send, recv, kCount, ncclFloat32, 1, comm, stream), kCount);
      ncclResult_t async = ncclInternalError;
      EXPECT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
      EXPECT_EQ(async, ncclSuccess);
      ncclCommDestroy(comm);
      cudaStreamDestroy(stream);
      cudaFree(send);
      cudaFree(recv);
    });
  for (auto& t : ranks) t.join();

  auto element = [](int rank, size_t i) { return float(rank * 10000 + int(i)); };
  for (int rank = 0; rank < kRanks; ++rank) {
    for (size_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(all_reduce[size_t(rank)][i], element(0, i) + element(1, i) + element(2, i)) << i;
      ASSERT_EQ(reduce_scatter[size_t(rank)][i],
                element(0, size_t(rank) * kCount + i) + element(1, size_t(rank) * kCount + i) +
                    element(2, size_t(rank) * kCount + i)) << i;
      ASSERT_EQ(broadcast[size_t(rank)][i], element(1, i)) << i;
    }
    for (size_t i = 0; i < kCount * kRanks; ++i)
      ASSERT_EQ(all_gather[size_t(rank)][i], element(int(i / kCount), i % kCount)) << i;
  }
}

TEST(FakeNccl, AnIdThatNcclDidNotMakeIsRefused) {
  ncclUniqueId foreign{};
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 2, foreign, 0), ncclInvalidArgument);
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);  // rank out of range
}

// A rank whose peer never issues the collective waits, without error, until it is aborted.
TEST(FakeNccl, AbortEndsWorkThatWaitsForAMissingPeer) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comms[2] = {nullptr, nullptr};
  std::thread other([&] { ncclCommInitRank(&comms[1], 2, id, 1); });
  ASSERT_EQ(ncclCommInitRank(&comms[0], 2, id, 0), ncclSuccess);
  other.join();
  ASSERT_NE(comms[1], nullptr);
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  float* buffer = on_device({1});
  ASSERT_EQ(ncclAllReduce(buffer, buffer, 1, ncclFloat32, ncclSum, comms[0], stream), ncclSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady) << "an all-reduce finished without its peer";
  ncclResult_t async = ncclInternalError;
  ncclCommGetAsyncError(comms[0], &async);
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // the aborted work is gone
  ncclCommDestroy(comms[1]);
  cudaStreamDestroy(stream);
  cudaFree(buffer);
}

// The misbehaviour the environment asks of a rank (RANK) is what that rank gets, and the log
// records it.
class FakeNcclFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = ::testing::TempDir() + "fake-nccl-" + std::to_string(getpid()) + ".log";
    std::remove(log_.c_str());
  }
  void TearDown() override { std::remove(log_.c_str()); }
  std::string log_;
  ScopedEnv rank_{"RANK", "0"};
};

TEST_F(FakeNcclFaults, InitFailsForTheRankNamed) {
  ScopedEnv log("MUSTER_FAKE_NCCL_LOG", log_);
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclComm_t comm = nullptr;
  {
    ScopedEnv fail("MUSTER_FAKE_NCCL_INIT_FAIL", "1");  // another rank
    comm = lone_comm();
    ASSERT_NE(comm, nullptr);
    ncclCommDestroy(comm);
  }
  ScopedEnv fail("MUSTER_FAKE_NCCL_INIT_FAIL", "0");
  EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSystemError);
  EXPECT_NE(read_file(log_).find("0 init-failed"), std::string::npos) << read_file(log_);
}

TEST_F(FakeNcclFaults, AnAsyncErrorIsReportedAndTheWorkNeverFinishesUntilAborted) {
  ScopedEnv log("MUSTER_FAKE_NCCL_LOG", log_);
  ncclComm_t comm = lone_comm();
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  float* buffer = on_device({1});
  ASSERT_EQ(ncclAllReduce(buffer, buffer, 1, ncclFloat32, ncclSum, comm, stream), ncclSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // the first one works
  ScopedEnv error("MUSTER_FAKE_NCCL_ASYNC_ERROR", "0:1");  // from this process's first on
  ASSERT_EQ(ncclAllReduce(buffer, buffer, 1, ncclFloat32, ncclSum, comm, stream), ncclSuccess);
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(comm, &async);
  EXPECT_EQ(async, ncclSystemError);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const std::string events = read_file(log_);
  EXPECT_NE(events.find("0 async-error"), std::string::npos) << events;
  EXPECT_NE(events.find("0 abort"), std::string::npos) << events;
  cudaStreamDestroy(stream);
  cudaFree(buffer);
}

TEST_F(FakeNcclFaults, AHungRanksCollectiveNeverReturnsToItsCaller) {
  ScopedEnv log("MUSTER_FAKE_NCCL_LOG", log_);
  ncclComm_t comm = lone_comm();
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  float* buffer = on_device({1});
  ScopedEnv hang("MUSTER_FAKE_NCCL_HANG", "0:1");
  auto returned = std::make_shared<std::atomic<bool>>(false);
  // The thread stays hung until the test program exits, as a hung rank's would.
  std::thread([=] {
    ncclAllReduce(buffer, buffer, 1, ncclFloat32, ncclSum, comm, stream);
    *returned = true;
  }).detach();
  // Once the fake says the rank hangs (however late the thread got a CPU), the call must
  // still not have returned a while later.
  for (int waited = 0; read_file(log_).find("0 hang") == std::string::npos && waited < 100; ++waited)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_NE(read_file(log_).find("0 hang"), std::string::npos) << read_file(log_);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(*returned);
}

// ---- the rates of copies and GEMMs, on the streams' clocks ----

// The milliseconds between two events around `enqueue`'s work on a new stream of `device`.
template <typename Enqueue>
float timed_ms(int device, Enqueue enqueue) {
  EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, end = nullptr;
  EXPECT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  EXPECT_EQ(cudaEventCreateWithFlags(&start, 0), cudaSuccess);
  EXPECT_EQ(cudaEventCreateWithFlags(&end, 0), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(start, stream), cudaSuccess);
  enqueue(stream);
  EXPECT_EQ(cudaEventRecord(end, stream), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(end), cudaSuccess);
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaSuccess);
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  cudaStreamDestroy(stream);
  cudaSetDevice(0);
  return ms;
}

constexpr size_t kCopyBytes = 8 << 20;

double ms_at(double bytes, double gbps) { return bytes / (gbps * 1e9) * 1e3; }

TEST(FakeCudaRates, RateLinesFollowTheirGpuAndPeerLinesNameBothGpus) {
  std::istringstream text(
      "gpu 0000:18:00.0 GPU-a NVIDIA H100\ngpu 0000:2a:00.0 GPU-b NVIDIA H100\n"
      "h2d 0000:18:00.0 12.5\nd2h 0000:18:00.0 11\nhbm 0000:2a:00.0 900\ngemm 0000:2a:00.0 150\n"
      "p2p 0000:18:00.0 0000:2a:00.0 7\nclocks 0000:2a:00.0 1200 1980\n");
  const auto gpus = muster::fake_gpu::read_machine(text);
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].h2d_gbps, 12.5);
  EXPECT_EQ(gpus[0].d2h_gbps, 11);
  EXPECT_EQ(gpus[0].hbm_gbps, 2000);  // the default, where no line says
  EXPECT_EQ(gpus[1].hbm_gbps, 900);
  EXPECT_EQ(gpus[1].gemm_tflops, 150);
  EXPECT_EQ(gpus[1].sm_clock_mhz, 1200u);
  EXPECT_EQ(muster::fake_gpu::p2p_gbps(gpus[0], gpus[1]), 7);
  EXPECT_EQ(muster::fake_gpu::p2p_gbps(gpus[1], gpus[0]), 7);
}

TEST(FakeCudaRates, HostCopiesFromPinnedMemoryTakeTheirRateAndPageableOnesTwice) {
  void* host = nullptr;
  void* device = nullptr;
  ASSERT_EQ(cudaMallocHost(&host, kCopyBytes), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&device, kCopyBytes), cudaSuccess);
  static_cast<char*>(host)[kCopyBytes - 1] = 42;
  const float h2d = timed_ms(1, [&](cudaStream_t s) {
    EXPECT_EQ(cudaMemcpyAsync(device, host, kCopyBytes, cudaMemcpyHostToDevice, s), cudaSuccess);
  });
  EXPECT_NEAR(h2d, ms_at(kCopyBytes, 50), 1e-3);
  static_cast<char*>(host)[kCopyBytes - 1] = 0;
  const float d2h = timed_ms(1, [&](cudaStream_t s) {
    EXPECT_EQ(cudaMemcpyAsync(host, device, kCopyBytes, cudaMemcpyDeviceToHost, s), cudaSuccess);
  });
  EXPECT_NEAR(d2h, ms_at(kCopyBytes, 50), 1e-3);
  EXPECT_EQ(static_cast<char*>(host)[kCopyBytes - 1], 42);  // the bytes went there and back
  std::vector<char> pageable(kCopyBytes);
  const float staged = timed_ms(1, [&](cudaStream_t s) {
    EXPECT_EQ(cudaMemcpyAsync(device, pageable.data(), kCopyBytes, cudaMemcpyHostToDevice, s), cudaSuccess);
  });
  EXPECT_NEAR(staged, 2 * ms_at(kCopyBytes, 50), 1e-3);
  // A host pointer where the kind says device is refused, as the real runtime refuses it.
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  EXPECT_EQ(cudaMemcpyAsync(host, pageable.data(), kCopyBytes, cudaMemcpyDeviceToHost, s), cudaErrorInvalidValue);
  cudaStreamDestroy(s);
  cudaSetDevice(1);
  cudaFree(device);
  cudaSetDevice(0);
  EXPECT_EQ(cudaFreeHost(host), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pageable.data()), cudaErrorInvalidValue);
}

TEST(FakeCudaRates, ACopyWithinAGpuCountsItsBytesReadAndWritten) {
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, kCopyBytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, kCopyBytes), cudaSuccess);
  const float ms = timed_ms(0, [&](cudaStream_t s) {
    EXPECT_EQ(cudaMemcpyAsync(b, a, kCopyBytes, cudaMemcpyDeviceToDevice, s), cudaSuccess);
  });
  EXPECT_NEAR(ms, ms_at(2.0 * kCopyBytes, 2000), 1e-4);
  cudaFree(a);
  cudaFree(b);
}

TEST(FakeCudaRates, PeerCopiesGoAtTheirNvlinksRateOncePeerAccessIsOnAndStagedBefore) {
  // four-gpus-pairwise: GPUs 2 and 3 share four NVLinks (80 GB/s here).
  void *on2 = nullptr, *on3 = nullptr;
  cudaSetDevice(2);
  ASSERT_EQ(cudaMalloc(&on2, kCopyBytes), cudaSuccess);
  cudaSetDevice(3);
  ASSERT_EQ(cudaMalloc(&on3, kCopyBytes), cudaSuccess);
  int can = 0;
  EXPECT_EQ(cudaDeviceCanAccessPeer(&can, 2, 3), cudaSuccess);
  EXPECT_EQ(can, 1);
  const float staged = timed_ms(2, [&](cudaStream_t s) {
    EXPECT_EQ(cudaMemcpyPeerAsync(on3, 3, on2, 2, kCopyBytes, s), cudaSuccess);
  });
  EXPECT_NEAR(staged, 2 * ms_at(kCopyBytes, 80), 1e-3);
  cudaSetDevice(2);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(3, 0), cudaSuccess);
  EXPECT_EQ(cudaDeviceEnablePeerAccess(3, 0), cudaErrorPeerAccessAlreadyEnabled);
  const float direct = timed_ms(2, [&](cudaStream_t s) {
    EXPECT_EQ(cudaMemcpyPeerAsync(on3, 3, on2, 2, kCopyBytes, s), cudaSuccess);
  });
  EXPECT_NEAR(direct, ms_at(kCopyBytes, 80), 1e-3);
  // A pointer that is not of the device named is refused.
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  EXPECT_EQ(cudaMemcpyPeerAsync(on3, 2, on2, 2, kCopyBytes, s), cudaErrorInvalidValue);
  cudaStreamDestroy(s);
  cudaFree(on3);
  cudaSetDevice(2);
  cudaFree(on2);
  cudaSetDevice(0);
}

TEST(FakeCudaRates, EventsWithoutTimingOrNeverRecordedGiveNoTime) {
  cudaEvent_t untimed = nullptr, timed = nullptr;
  cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&timed, 0);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, timed, timed), cudaErrorInvalidResourceHandle);  // never recorded
  cudaStream_t s = nullptr;
  cudaStreamCreate(&s);
  cudaEventRecord(untimed, s);
  cudaEventRecord(timed, s);
  cudaStreamSynchronize(s);
  EXPECT_EQ(cudaEventElapsedTime(&ms, untimed, timed), cudaErrorInvalidResourceHandle);
  cudaEventDestroy(untimed);
  cudaEventDestroy(timed);
  cudaStreamDestroy(s);
}

TEST(FakeCublas, AGemmTakesItsFlopsOverTheGpusRate) {
  const int n = 256;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cudaSetDevice(1);
  ASSERT_EQ(cudaMalloc(&a, n * n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, n * n * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&c, n * n * 2), cudaSuccess);
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate_v2(&handle), CUBLAS_STATUS_SUCCESS);
  const float one = 1, zero = 0;
  const float ms = timed_ms(1, [&](cudaStream_t s) {
    EXPECT_EQ(cublasSetStream_v2(handle, s), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                           &zero, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    // Another device's memory, or a leading dimension below the matrix's, is refused.
    EXPECT_EQ(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n - 1, b, CUDA_R_16BF,
                           n, &zero, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_INVALID_VALUE);
  });
  EXPECT_NEAR(ms, 2.0 * n * n * n / 600e12 * 1e3, 1e-6);
  cublasDestroy_v2(handle);
  cudaSetDevice(1);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cudaSetDevice(0);
}

}  // namespace
