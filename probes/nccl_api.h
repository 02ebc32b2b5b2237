// The NCCL declarations muster uses, as its API documents them, beside the CUDA runtime's
// (launcher/cuda_runtime_api.h): neither header is on a CPU-only machine, and muster must
// build there, opening the libraries at run time. tests/fakes/gpu/abi_check.cpp compares every
// one of these with the real nccl.h wherever it is installed, so a mismatch fails the build of
// the tests.
#pragma once

#include <cstddef>

#include "launcher/cuda_runtime_api.h"

namespace muster::nccl_api {

using namespace cuda_runtime_api;

using ncclComm_t = struct ncclComm*;
using ncclResult_t = int;                    // enum ncclResult_t
using ncclDataType_t = int;                  // enum ncclDataType_t
using ncclRedOp_t = int;                     // enum ncclRedOp_t

struct ncclUniqueId {
  char internal[128];                        // NCCL_UNIQUE_ID_BYTES
};

constexpr ncclDataType_t kFloat32 = 7;       // ncclFloat32
constexpr ncclRedOp_t kSum = 0;              // ncclSum
constexpr ncclResult_t kNcclSuccess = 0;     // ncclSuccess
constexpr ncclResult_t kNcclInProgress = 7;  // ncclInProgress

// The first fields of ncclConfig_t (2.14 had size to blocking; 2.17 added the rest of these).
// Every NCCL reads only the `size` bytes a caller's struct has, up to its own, and takes its
// defaults for fields newer than the `version` given (2.14 here): so blocking = 0 is all that
// is set, whatever the NCCL. Made only by nonblocking_config(), as NCCL_CONFIG_INITIALIZER would.
struct ncclConfig_v21400 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
};
constexpr unsigned int kNcclConfigMagic = 0xcafebeef;     // NCCL_CONFIG_INITIALIZER's
constexpr unsigned int kNcclConfigVersion = 21400;        // NCCL_VERSION(2, 14, 0)
constexpr int kNcclConfigUndefInt = -2147483647 - 1;      // NCCL_CONFIG_UNDEF_INT (INT_MIN)

// A communicator whose calls return at once (ncclInProgress) and finish in the background,
// polled with ncclCommGetAsyncError: its creation can then be given up on (ncclCommAbort).
constexpr ncclConfig_v21400 nonblocking_config() {
  return {sizeof(ncclConfig_v21400), kNcclConfigMagic, kNcclConfigVersion, /*blocking=*/0,
          kNcclConfigUndefInt, kNcclConfigUndefInt, kNcclConfigUndefInt, nullptr};
}

// The entry points, by the signatures of their documentation.
using GetUniqueId = ncclResult_t (*)(ncclUniqueId*);
using CommInitRank = ncclResult_t (*)(ncclComm_t*, int nranks, ncclUniqueId, int rank);
using CommInitRankConfig = ncclResult_t (*)(ncclComm_t*, int nranks, ncclUniqueId, int rank, ncclConfig_v21400*);
using CommAbort = ncclResult_t (*)(ncclComm_t);
using CommDestroy = ncclResult_t (*)(ncclComm_t);
using CommGetAsyncError = ncclResult_t (*)(ncclComm_t, ncclResult_t*);
using GetErrorString = const char* (*)(ncclResult_t);
using AllReduce = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
using AllGather = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
using ReduceScatter = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
using Broadcast = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, int root, ncclComm_t, cudaStream_t);

}  // namespace muster::nccl_api
