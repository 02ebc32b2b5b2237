// The CUDA runtime and cuBLAS declarations the GPU stress tests use, as NVIDIA's documentation
// gives them: neither header is installed on CPU-only machines, and muster builds there and
// opens both libraries at run time. tests/fakes/gpu/cuda_abi_check.cpp checks each against the
// real headers where they are installed.
#pragma once

#include <cstddef>

namespace muster::cuda_api {

using cudaError_t = int;                       // enum cudaError
using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;
using cublasStatus_t = int;                    // enum cublasStatus_t
using cublasHandle_t = struct cublasContext*;

constexpr cudaError_t kCudaSuccess = 0;               // cudaSuccess
constexpr cudaError_t kPeerAccessAlreadyEnabled = 704;  // cudaErrorPeerAccessAlreadyEnabled
constexpr int kMemcpyHostToDevice = 1;                // cudaMemcpyHostToDevice
constexpr int kMemcpyDeviceToHost = 2;                // cudaMemcpyDeviceToHost
constexpr int kMemcpyDeviceToDevice = 3;              // cudaMemcpyDeviceToDevice
constexpr cublasStatus_t kCublasSuccess = 0;          // CUBLAS_STATUS_SUCCESS
constexpr int kCublasOpN = 0;                         // CUBLAS_OP_N
constexpr int kDataBf16 = 14;                         // CUDA_R_16BF
constexpr int kComputeF32 = 68;                       // CUBLAS_COMPUTE_32F
constexpr int kGemmDefault = -1;                      // CUBLAS_GEMM_DEFAULT

using GetDeviceCount = cudaError_t (*)(int*);
using SetDevice = cudaError_t (*)(int);
using DeviceGetPCIBusId = cudaError_t (*)(char*, int length, int device);
using Malloc = cudaError_t (*)(void**, size_t);
using Free = cudaError_t (*)(void*);
using MallocHost = cudaError_t (*)(void**, size_t);
using FreeHost = cudaError_t (*)(void*);
using MemcpyAsync = cudaError_t (*)(void* dst, const void* src, size_t, int kind, cudaStream_t);
using MemcpyPeerAsync = cudaError_t (*)(void* dst, int dst_device, const void* src, int src_device, size_t,
                                        cudaStream_t);
using DeviceCanAccessPeer = cudaError_t (*)(int* can_access, int device, int peer);
using DeviceEnablePeerAccess = cudaError_t (*)(int peer, unsigned int flags);
using StreamCreate = cudaError_t (*)(cudaStream_t*);
using StreamDestroy = cudaError_t (*)(cudaStream_t);
using StreamSynchronize = cudaError_t (*)(cudaStream_t);
using EventCreateWithFlags = cudaError_t (*)(cudaEvent_t*, unsigned int);
using EventRecord = cudaError_t (*)(cudaEvent_t, cudaStream_t);
using EventSynchronize = cudaError_t (*)(cudaEvent_t);
using EventElapsedTime = cudaError_t (*)(float* ms, cudaEvent_t start, cudaEvent_t end);
using EventDestroy = cudaError_t (*)(cudaEvent_t);
using GetErrorString = const char* (*)(cudaError_t);

using CublasCreate = cublasStatus_t (*)(cublasHandle_t*);  // cublasCreate_v2
using CublasDestroy = cublasStatus_t (*)(cublasHandle_t);  // cublasDestroy_v2
using CublasSetStream = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);  // cublasSetStream_v2
// cublasGemmEx: handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C,
// Ctype, ldc, computeType, algo (the enums are ints).
using CublasGemmEx = cublasStatus_t (*)(cublasHandle_t, int, int, int, int, int, const void*, const void*, int, int,
                                        const void*, int, int, const void*, void*, int, int, int, int);

}  // namespace muster::cuda_api
