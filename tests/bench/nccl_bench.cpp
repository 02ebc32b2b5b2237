// Benchmark (not a test): `muster smoke --backend nccl`'s all-reduce against a raw NCCL
// all-reduce loop on the same GPUs of this machine, measured in one run, with the ratio per
// size. The raw loop times as nccl-tests does: one thread per GPU, each its own communicator
// and stream; warm-up, then a timer around `iters` all-reduces enqueued back to back and one
// stream synchronisation; the time per iteration averaged over the ranks; busbw = algbw *
// 2(n-1)/n. muster's rows give both its slowest rank's time and the average over ranks.
// NCCL and the CUDA runtime are opened as muster opens them (LD_LIBRARY_PATH first): on a
// machine without a GPU, the fakes of tests/fakes/gpu run it, which checks the program and
// is never a GPU result.
//
// Usage: build/tests/bench/nccl_bench [GPUS] [ITERS]   (GPUS defaults to every GPU)
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "launcher/node_library.h"
#include "probes/nccl_api.h"
#include "tests/support/build_paths.h"

using muster::testing::muster_binary;

namespace {

using namespace muster::nccl_api;

struct Nccl {
  GetUniqueId get_unique_id;
  CommInitRank comm_init_rank;
  CommDestroy comm_destroy;
  GetErrorString error_string;
  AllReduce all_reduce;
  SetDevice set_device;
  GetDeviceCount device_count;
  Malloc malloc;
  Free free;
  StreamCreate stream_create;
  StreamDestroy stream_destroy;
  cudaError_t (*stream_synchronize)(cudaStream_t);
};

template <typename Fn>
void bind(void* lib, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!fn) throw std::runtime_error(fmt::format("{} is missing", name));
}

Nccl open_nccl() {
  void* cudart = nullptr;
  for (const char* name : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"})
    if ((cudart = muster::open_node_library(name, RTLD_NOW | RTLD_GLOBAL))) break;
  void* nccl = muster::open_node_library("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
  if (!cudart || !nccl) throw std::runtime_error("the CUDA runtime or libnccl.so.2 does not load");
  Nccl n{};
  bind(nccl, n.get_unique_id, "ncclGetUniqueId");
  bind(nccl, n.comm_init_rank, "ncclCommInitRank");
  bind(nccl, n.comm_destroy, "ncclCommDestroy");
  bind(nccl, n.error_string, "ncclGetErrorString");
  bind(nccl, n.all_reduce, "ncclAllReduce");
  bind(cudart, n.set_device, "cudaSetDevice");
  bind(cudart, n.device_count, "cudaGetDeviceCount");
  bind(cudart, n.malloc, "cudaMalloc");
  bind(cudart, n.free, "cudaFree");
  bind(cudart, n.stream_create, "cudaStreamCreate");
  bind(cudart, n.stream_destroy, "cudaStreamDestroy");
  bind(cudart, n.stream_synchronize, "cudaStreamSynchronize");
  return n;
}

void check(const Nccl& n, ncclResult_t rc, const char* what) {
  if (rc != kNcclSuccess) throw std::runtime_error(fmt::format("{}: {}", what, n.error_string(rc)));
}

// Microseconds per all-reduce for each size, averaged over the ranks (nccl-tests' -a 1).
std::map<size_t, double> raw_nccl(const Nccl& n, int gpus, const std::vector<size_t>& sizes,
                                  int iters, int warmup) {
  ncclUniqueId id{};
  check(n, n.get_unique_id(&id), "ncclGetUniqueId");
  std::vector<std::map<size_t, double>> by_rank(static_cast<size_t>(gpus));
  std::barrier start_together(gpus);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < gpus; ++rank)
    threads.emplace_back([&, rank] {
      try {
        n.set_device(rank);
        cudaStream_t stream = nullptr;
        n.stream_create(&stream);
        ncclComm_t comm = nullptr;
        check(n, n.comm_init_rank(&comm, gpus, id, rank), "ncclCommInitRank");
        void* buffer = nullptr;
        n.malloc(&buffer, sizes.back());
        for (size_t bytes : sizes) {
          const size_t count = bytes / sizeof(float);
          for (int i = 0; i < warmup; ++i)
            check(n, n.all_reduce(buffer, buffer, count, kFloat32, kSum, comm, stream), "ncclAllReduce");
          n.stream_synchronize(stream);
          start_together.arrive_and_wait();
          auto begin = std::chrono::steady_clock::now();
          for (int i = 0; i < iters; ++i)
            check(n, n.all_reduce(buffer, buffer, count, kFloat32, kSum, comm, stream), "ncclAllReduce");
          n.stream_synchronize(stream);
          by_rank[size_t(rank)][bytes] =
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - begin).count() / iters;
        }
        n.free(buffer);
        n.comm_destroy(comm);
        n.stream_destroy(stream);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        std::_Exit(1);  // the other ranks would wait for this one for ever
      }
    });
  for (auto& t : threads) t.join();
  std::map<size_t, double> average;
  for (size_t bytes : sizes) {
    for (const auto& rank : by_rank) average[bytes] += rank.at(bytes);
    average[bytes] /= gpus;
  }
  return average;
}

std::string run_and_capture(const std::vector<std::string>& argv) {
  std::string command;
  for (const auto& word : argv) command += "'" + word + "' ";
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen");
  std::string out;
  char chunk[4096];
  for (size_t got; (got = fread(chunk, 1, sizeof chunk, pipe)) > 0;) out.append(chunk, got);
  pclose(pipe);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Nccl nccl = open_nccl();
    int devices = 0;
    nccl.device_count(&devices);
    const int gpus = argc > 1 ? std::atoi(argv[1]) : devices;
    const int iters = argc > 2 ? std::atoi(argv[2]) : 20, warmup = 5;
    if (gpus < 2 || gpus > devices) {
      std::fprintf(stderr, "nccl_bench: %d GPU(s) asked for, %d here; an all-reduce needs 2 or more\n",
                   gpus, devices);
      return 2;
    }
    const std::vector<size_t> sizes = {4096, 65536, 1 << 20, 16 << 20, 256 << 20};

    const std::string report = run_and_capture(
        {muster_binary(), "smoke", "-n", std::to_string(gpus), "--backend", "nccl", "--min-bytes", "4K",
         "--max-bytes", "256M", "--step-factor", "16", "--iters", std::to_string(iters),
         "--warmup", std::to_string(warmup), "--json"});
    const auto smoke = nlohmann::json::parse(report);
    const auto raw = raw_nccl(nccl, gpus, sizes, iters, warmup);

    const double factor = 2.0 * (gpus - 1) / gpus;
    std::printf("all_reduce, %d GPUs on this machine (%s); busbw GB/s (decimal), factor %.2f\n", gpus,
                std::getenv("MUSTER_FAKE_GPU_MACHINE") ? "FAKE GPUs: not a GPU result" : "real GPUs",
                factor);
    std::printf("%11s %14s %13s %13s %13s %12s %16s\n", "bytes", "muster avg us", "muster max us",
                "raw NCCL us", "muster busbw", "raw busbw", "muster/raw time");
    for (const auto& row : smoke.at("results")) {
      if (row.at("op") != "all_reduce" || row.at("group") != "world") continue;
      const size_t bytes = row.at("bytes");
      if (!raw.count(bytes)) continue;
      double average = 0;
      for (const auto& [rank, t] : row.at("time_us_by_rank").items()) average += t.get<double>();
      average /= double(row.at("time_us_by_rank").size());
      auto busbw = [&](double us) { return double(bytes) / 1e9 / (us / 1e6) * factor; };
      std::printf("%11zu %14.1f %13.1f %13.1f %13.3f %12.3f %16.2f\n", bytes, average,
                  row.at("time_us").get<double>(), raw.at(bytes), busbw(average), busbw(raw.at(bytes)),
                  average / raw.at(bytes));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_bench: %s\n", e.what());
    return 1;
  }
}
