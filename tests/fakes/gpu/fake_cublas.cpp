// A fake cuBLAS (libcublas.so.13), compiled against the real cublas_api.h so that its
// signatures, types and status codes are the real ABI's. It has the entry points muster's
// GEMM test calls: a handle on the current device, its stream, and cublasGemmEx for FP16 and
// BF16 inputs, which puts a kernel on the stream taking 2*m*n*k FLOPs over the GPU's `gemm`
// rate (fake_machine.h) on the stream's clock. The product is not computed: muster times the
// GEMM and never reads C.
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <cstdint>

extern "C" {
// Of the fake CUDA runtime (fake_cudart.cpp).
int muster_fake_cuda_enqueue_kernel(cudaStream_t stream, double seconds);
int muster_fake_cuda_device_of(const void* p, size_t size);
double muster_fake_cuda_gemm_tflops(int device);
}

struct cublasContext {
  int device = 0;
  cudaStream_t stream = nullptr;
};

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new cublasContext{device, nullptr};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute_type, cublasGemmAlgo_t algo) {
  (void)algo;
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  const bool a_t = transa != CUBLAS_OP_N, b_t = transb != CUBLAS_OP_N;
  if (lda < (a_t ? k : m) || ldb < (b_t ? n : k) || ldc < m || lda < 1 || ldb < 1 || ldc < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool half = Atype == CUDA_R_16F && Btype == CUDA_R_16F;
  const bool bf16 = Atype == CUDA_R_16BF && Btype == CUDA_R_16BF;
  if (!(half || bf16) || (Ctype != Atype && Ctype != CUDA_R_32F) || compute_type != CUBLAS_COMPUTE_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;  // only what muster asks for is described
  const size_t element = 2, c_element = Ctype == CUDA_R_32F ? 4 : 2;
  const size_t a_bytes = size_t(lda) * size_t(a_t ? m : k) * element;
  const size_t b_bytes = size_t(ldb) * size_t(b_t ? k : n) * element;
  const size_t c_bytes = size_t(ldc) * size_t(n) * c_element;
  if (muster_fake_cuda_device_of(A, a_bytes) != handle->device ||
      muster_fake_cuda_device_of(B, b_bytes) != handle->device ||
      muster_fake_cuda_device_of(C, c_bytes) != handle->device)
    return CUBLAS_STATUS_INVALID_VALUE;  // not this handle's device's memory
  if (!handle->stream) return CUBLAS_STATUS_EXECUTION_FAILED;  // the legacy stream is not modelled
  const double tflops = muster_fake_cuda_gemm_tflops(handle->device);
  const double seconds = tflops > 0 ? 2.0 * double(m) * double(n) * double(k) / (tflops * 1e12) : 0;
  return muster_fake_cuda_enqueue_kernel(handle->stream, seconds) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                                                : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // extern "C"
