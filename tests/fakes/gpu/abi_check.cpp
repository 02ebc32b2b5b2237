// Built into the fake NCCL: muster declares the NCCL and CUDA runtime entry points itself
// (probes/nccl_api.h) so that it builds without either header. Here, where the real headers
// are installed, every value and size muster relies on is checked against them: a mismatch
// fails the build.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <climits>
#include <cstddef>
#include <type_traits>

#include "probes/nccl_api.h"

namespace api = muster::nccl_api;

static_assert(api::kFloat32 == ncclFloat32);
static_assert(api::kSum == ncclSum);
static_assert(api::kNcclSuccess == ncclSuccess);
static_assert(api::kNcclInProgress == ncclInProgress);
static_assert(api::kMemcpyHostToDevice == cudaMemcpyHostToDevice);
static_assert(api::kMemcpyDeviceToHost == cudaMemcpyDeviceToHost);
static_assert(api::kCudaSuccess == cudaSuccess);
static_assert(api::kCudaNotReady == cudaErrorNotReady);
static_assert(sizeof(api::ncclUniqueId) == sizeof(ncclUniqueId));
static_assert(sizeof(api::ncclResult_t) == sizeof(ncclResult_t));
static_assert(sizeof(api::ncclDataType_t) == sizeof(ncclDataType_t));
static_assert(sizeof(api::ncclRedOp_t) == sizeof(ncclRedOp_t));
static_assert(sizeof(api::cudaError_t) == sizeof(cudaError_t));
static_assert(sizeof(api::cudaStream_t) == sizeof(cudaStream_t));
static_assert(sizeof(api::ncclComm_t) == sizeof(ncclComm_t));

// Each entry point muster calls, by the real declaration: the same number of parameters,
// each of the size muster passes (its enums are ints, its handles pointers).
template <typename R1, typename... A1, typename R2, typename... A2>
constexpr bool same_shape(R1 (*)(A1...), R2 (*)(A2...)) {
  if constexpr (sizeof...(A1) != sizeof...(A2)) return false;
  else return sizeof(R1) == sizeof(R2) && ((sizeof(A1) == sizeof(A2)) && ...);
}
static_assert(same_shape(api::GetUniqueId{}, &ncclGetUniqueId));
static_assert(same_shape(api::CommInitRank{}, &ncclCommInitRank));
static_assert(same_shape(api::CommInitRankConfig{}, &ncclCommInitRankConfig));
// The config muster passes is the real struct's first fields, where the real one has them.
#define SAME_FIELD(field)                                                                  \
  static_assert(offsetof(api::ncclConfig_v21400, field) == offsetof(ncclConfig_t, field) && \
                sizeof(api::ncclConfig_v21400::field) == sizeof(ncclConfig_t::field))
SAME_FIELD(size);
SAME_FIELD(magic);
SAME_FIELD(version);
SAME_FIELD(blocking);
SAME_FIELD(cgaClusterSize);
SAME_FIELD(minCTAs);
SAME_FIELD(maxCTAs);
SAME_FIELD(netName);
#undef SAME_FIELD
static_assert(api::kNcclConfigUndefInt == NCCL_CONFIG_UNDEF_INT);
static_assert(ncclConfig_t(NCCL_CONFIG_INITIALIZER).magic == api::kNcclConfigMagic);
static_assert(api::kNcclConfigVersion == NCCL_VERSION(2, 14, 0));
static_assert(sizeof(api::ncclConfig_v21400) <= sizeof(ncclConfig_t));
static_assert(same_shape(api::CommAbort{}, &ncclCommAbort));
static_assert(same_shape(api::CommDestroy{}, &ncclCommDestroy));
static_assert(same_shape(api::CommGetAsyncError{}, &ncclCommGetAsyncError));
static_assert(same_shape(api::GetErrorString{}, &ncclGetErrorString));
static_assert(same_shape(api::AllReduce{}, &ncclAllReduce));
static_assert(same_shape(api::AllGather{}, &ncclAllGather));
static_assert(same_shape(api::ReduceScatter{}, &ncclReduceScatter));
static_assert(same_shape(api::Broadcast{}, &ncclBroadcast));
static_assert(same_shape(api::SetDevice{}, &cudaSetDevice));
static_assert(same_shape(api::GetDeviceCount{}, &cudaGetDeviceCount));
// cuda_runtime.h adds a template overload; the C entry point is the one dlsym finds.
static_assert(same_shape(api::Malloc{}, static_cast<cudaError_t (*)(void**, size_t)>(&cudaMalloc)));
static_assert(same_shape(api::Free{}, &cudaFree));
static_assert(same_shape(api::Memcpy{}, &cudaMemcpy));
static_assert(same_shape(api::StreamCreate{}, &cudaStreamCreate));
static_assert(same_shape(api::StreamDestroy{}, &cudaStreamDestroy));
static_assert(same_shape(api::StreamQuery{}, &cudaStreamQuery));
static_assert(same_shape(api::EventCreateWithFlags{}, &cudaEventCreateWithFlags));
static_assert(same_shape(api::EventRecord{}, &cudaEventRecord));
static_assert(same_shape(api::EventQuery{}, &cudaEventQuery));
static_assert(same_shape(api::EventDestroy{}, &cudaEventDestroy));
static_assert(api::kEventDisableTiming == cudaEventDisableTiming);
static_assert(sizeof(api::cudaEvent_t) == sizeof(cudaEvent_t));
static_assert(same_shape(api::CudaGetErrorString{}, &cudaGetErrorString));
