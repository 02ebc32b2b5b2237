// The CUDA runtime declarations muster uses (NCCL's smoke collectives, the GPU stress tests),
// as NVIDIA's documentation gives them: cuda_runtime_api.h is not on a CPU-only machine, and
// muster builds there, opening libcudart at run time. tests/fakes/gpu/cuda_abi_check.cpp
// checks every one against the real header wherever it is installed: a mismatch fails the
// build of the tests.
#pragma once

#include <cstddef>

namespace muster::cuda_runtime_api {

// The CUDA runtime's sonames, newest first: a node has the one its CUDA installed.
inline constexpr const char* kCudaRuntimeSonames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                                      "libcudart.so"};

using cudaError_t = int;                       // enum cudaError
using cudaStream_t = struct CUstream_st*;
using cudaEvent_t = struct CUevent_st*;

constexpr cudaError_t kCudaSuccess = 0;                 // cudaSuccess
constexpr cudaError_t kCudaNotReady = 600;              // cudaErrorNotReady
constexpr cudaError_t kPeerAccessAlreadyEnabled = 704;  // cudaErrorPeerAccessAlreadyEnabled
constexpr int kMemcpyHostToDevice = 1;                  // cudaMemcpyHostToDevice
constexpr int kMemcpyDeviceToHost = 2;                  // cudaMemcpyDeviceToHost
constexpr int kMemcpyDeviceToDevice = 3;                // cudaMemcpyDeviceToDevice
constexpr unsigned kEventDisableTiming = 2;             // cudaEventDisableTiming

using GetDeviceCount = cudaError_t (*)(int*);
using SetDevice = cudaError_t (*)(int);
using DeviceGetPCIBusId = cudaError_t (*)(char*, int length, int device);
using Malloc = cudaError_t (*)(void**, size_t);
using Free = cudaError_t (*)(void*);
using MallocHost = cudaError_t (*)(void**, size_t);
using FreeHost = cudaError_t (*)(void*);
using Memcpy = cudaError_t (*)(void*, const void*, size_t, int kind);
using MemcpyAsync = cudaError_t (*)(void* dst, const void* src, size_t, int kind, cudaStream_t);
using MemcpyPeerAsync = cudaError_t (*)(void* dst, int dst_device, const void* src, int src_device, size_t,
                                        cudaStream_t);
using DeviceCanAccessPeer = cudaError_t (*)(int* can_access, int device, int peer);
using DeviceEnablePeerAccess = cudaError_t (*)(int peer, unsigned int flags);
using StreamCreate = cudaError_t (*)(cudaStream_t*);
using StreamDestroy = cudaError_t (*)(cudaStream_t);
using StreamSynchronize = cudaError_t (*)(cudaStream_t);
using StreamQuery = cudaError_t (*)(cudaStream_t);
using EventCreateWithFlags = cudaError_t (*)(cudaEvent_t*, unsigned int);
using EventRecord = cudaError_t (*)(cudaEvent_t, cudaStream_t);
using EventSynchronize = cudaError_t (*)(cudaEvent_t);
using EventQuery = cudaError_t (*)(cudaEvent_t);
using EventElapsedTime = cudaError_t (*)(float* ms, cudaEvent_t start, cudaEvent_t end);
using EventDestroy = cudaError_t (*)(cudaEvent_t);
using CudaGetErrorString = const char* (*)(cudaError_t);

}  // namespace muster::cuda_runtime_api
