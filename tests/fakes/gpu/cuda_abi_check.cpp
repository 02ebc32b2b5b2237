// Built into the fake cuBLAS: the CUDA runtime entry points and values muster declares itself
// (launcher/cuda_runtime_api.h, for NCCL's collectives and the GPU stress tests) and cuBLAS's
// (topology/health/cuda_api.h), checked against the real headers where they are installed: a
// mismatch fails the build.
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "tests/fakes/gpu/abi_shape.h"
#include "topology/health/cuda_api.h"

namespace api = muster::cuda_api;

static_assert(api::kCudaSuccess == cudaSuccess);
static_assert(api::kPeerAccessAlreadyEnabled == cudaErrorPeerAccessAlreadyEnabled);
static_assert(api::kMemcpyHostToDevice == cudaMemcpyHostToDevice);
static_assert(api::kMemcpyDeviceToHost == cudaMemcpyDeviceToHost);
static_assert(api::kMemcpyDeviceToDevice == cudaMemcpyDeviceToDevice);
static_assert(api::kCudaNotReady == cudaErrorNotReady);
static_assert(api::kEventDisableTiming == cudaEventDisableTiming);
static_assert(sizeof(api::cudaStream_t) == sizeof(cudaStream_t));
static_assert(sizeof(api::cudaEvent_t) == sizeof(cudaEvent_t));
static_assert(api::kCublasSuccess == CUBLAS_STATUS_SUCCESS);
static_assert(api::kCublasOpN == CUBLAS_OP_N);
static_assert(api::kDataBf16 == CUDA_R_16BF);
static_assert(api::kComputeF32 == CUBLAS_COMPUTE_32F);
static_assert(api::kGemmDefault == CUBLAS_GEMM_DEFAULT);
static_assert(sizeof(api::cudaError_t) == sizeof(cudaError_t));
static_assert(sizeof(api::cublasStatus_t) == sizeof(cublasStatus_t));

static_assert(same_shape(api::GetDeviceCount{}, &cudaGetDeviceCount));
static_assert(same_shape(api::SetDevice{}, &cudaSetDevice));
static_assert(same_shape(api::DeviceGetPCIBusId{}, &cudaDeviceGetPCIBusId));
static_assert(same_shape(api::Malloc{}, static_cast<cudaError_t (*)(void**, size_t)>(&cudaMalloc)));
static_assert(same_shape(api::Free{}, &cudaFree));
static_assert(same_shape(api::MallocHost{}, static_cast<cudaError_t (*)(void**, size_t)>(&cudaMallocHost)));
static_assert(same_shape(api::FreeHost{}, &cudaFreeHost));
static_assert(same_shape(api::MemcpyAsync{}, &cudaMemcpyAsync));
static_assert(same_shape(api::MemcpyPeerAsync{}, &cudaMemcpyPeerAsync));
static_assert(same_shape(api::DeviceCanAccessPeer{}, &cudaDeviceCanAccessPeer));
static_assert(same_shape(api::DeviceEnablePeerAccess{}, &cudaDeviceEnablePeerAccess));
static_assert(same_shape(api::StreamCreate{}, &cudaStreamCreate));
static_assert(same_shape(api::StreamDestroy{}, &cudaStreamDestroy));
static_assert(same_shape(api::StreamSynchronize{}, &cudaStreamSynchronize));
static_assert(same_shape(api::EventCreateWithFlags{}, &cudaEventCreateWithFlags));
static_assert(same_shape(api::EventRecord{}, static_cast<cudaError_t (*)(cudaEvent_t, cudaStream_t)>(&cudaEventRecord)));
static_assert(same_shape(api::EventSynchronize{}, &cudaEventSynchronize));
static_assert(same_shape(api::EventElapsedTime{}, &cudaEventElapsedTime));
static_assert(same_shape(api::EventDestroy{}, &cudaEventDestroy));
static_assert(same_shape(api::CudaGetErrorString{}, &cudaGetErrorString));
static_assert(same_shape(api::Memcpy{}, &cudaMemcpy));
static_assert(same_shape(api::StreamQuery{}, &cudaStreamQuery));
static_assert(same_shape(api::EventQuery{}, &cudaEventQuery));
static_assert(same_shape(api::CublasCreate{}, &cublasCreate_v2));
static_assert(same_shape(api::CublasDestroy{}, &cublasDestroy_v2));
static_assert(same_shape(api::CublasSetStream{}, &cublasSetStream_v2));
static_assert(same_shape(api::CublasGemmEx{},
                         static_cast<cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                                        int, const void*, const void*, cudaDataType, int, const void*,
                                                        cudaDataType, int, const void*, void*, cudaDataType, int,
                                                        cublasComputeType_t, cublasGemmAlgo_t)>(&cublasGemmEx)));
