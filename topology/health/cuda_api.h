// The cuBLAS declarations the GPU stress tests use, beside the CUDA runtime's
// (launcher/cuda_runtime_api.h), as NVIDIA's documentation gives them: no header is installed
// on CPU-only machines, and muster builds there and opens the libraries at run time.
// tests/fakes/gpu/cuda_abi_check.cpp checks each against the real headers where they are
// installed.
#pragma once

#include "launcher/cuda_runtime_api.h"

namespace muster::cuda_api {

using namespace cuda_runtime_api;

// cuBLAS's sonames, newest first.
inline constexpr const char* kCublasSonames[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11",
                                                 "libcublas.so"};

using cublasStatus_t = int;                    // enum cublasStatus_t
using cublasHandle_t = struct cublasContext*;

constexpr cublasStatus_t kCublasSuccess = 0;          // CUBLAS_STATUS_SUCCESS
constexpr int kCublasOpN = 0;                         // CUBLAS_OP_N
constexpr int kDataBf16 = 14;                         // CUDA_R_16BF
constexpr int kComputeF32 = 68;                       // CUBLAS_COMPUTE_32F
constexpr int kGemmDefault = -1;                      // CUBLAS_GEMM_DEFAULT

using CublasCreate = cublasStatus_t (*)(cublasHandle_t*);  // cublasCreate_v2
using CublasDestroy = cublasStatus_t (*)(cublasHandle_t);  // cublasDestroy_v2
using CublasSetStream = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);  // cublasSetStream_v2
// cublasGemmEx: handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C,
// Ctype, ldc, computeType, algo (the enums are ints).
using CublasGemmEx = cublasStatus_t (*)(cublasHandle_t, int, int, int, int, int, const void*, const void*, int, int,
                                        const void*, int, int, const void*, void*, int, int, int, int);

}  // namespace muster::cuda_api
