// This machine as it would be with the GPUs of one of tests/fakes/gpu/machines: the
// environment under which muster, and every process it starts, finds them through the same
// hwloc, dlopen and NVML calls as on a GPU node. hwloc reads this machine's own topology
// (an lstopo export) with the GPUs added on its PCI bus; the fake libraries are first on the
// library path; the fakes read the machine description.
#pragma once

#include <string>
#include <vector>

#include "tests/fakes/gpu/fake_machine.h"
#include "tests/support/command_runner.h"

// In a test: skip (or, in CI, fail) when the fakes a test needs were not built here.
#define MUSTER_REQUIRE_FAKE_NCCL()                                          \
  do {                                                                      \
    std::string why_not = ::muster::testing::FakeGpuMachine::nccl_unavailable_reason(); \
    if (!why_not.empty()) {                                                 \
      if (::muster::testing::in_ci()) FAIL() << why_not;                    \
      GTEST_SKIP() << why_not;                                              \
    }                                                                       \
  } while (0)

namespace muster::testing {

// The description of machine `name` under tests/fakes/gpu/machines (without ".txt").
std::string fake_gpu_machine_file(const std::string& name);
// The fake GPU libraries (NVML, the CUDA runtime, cuBLAS, NCCL) first on the library path,
// describing machine `name`, on this machine's own topology: what a node's health checks and
// stress tests find.
std::vector<std::string> fake_gpu_libraries(const std::string& name);

class FakeGpuMachine {
 public:
  // Why the fake CUDA runtime and NCCL are missing (no CUDA headers at build time), or "".
  static std::string nccl_unavailable_reason();

  // `name`: a description under tests/fakes/gpu/machines, without ".txt".
  explicit FakeGpuMachine(const std::string& name);

  // NAME=VALUE pairs for run_muster, RunningCommand or HostSetup::environment.
  std::vector<std::string> environment() const;
  const std::vector<fake_gpu::Gpu>& gpus() const { return gpus_; }
  const std::string& description_file() const { return description_; }
  const std::string& topology_file() const { return xml_; }

 private:
  TempDir dir_;
  std::string description_, xml_;
  std::vector<fake_gpu::Gpu> gpus_;
};

}  // namespace muster::testing
