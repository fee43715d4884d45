// Internal: launchers of the CUDA kernels (cuda_kernels.cu), called by CudaBackend.
//
// Contract: every pointer is device memory; each launcher queues work on `stream` and
// returns the launch error (cudaSuccess when queued). Kept free of C++20 so that nvcc can
// compile the kernels as C++17 whatever CMake knows about it.
#ifndef CASCADE_KERNELS_CUDA_CUDA_KERNELS_H_
#define CASCADE_KERNELS_CUDA_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace cascade::cuda {

struct DeviceQuery {
  const float* q;         // (n_heads, head_dim)
  float* out;             // (n_heads, head_dim)
  int64_t blocks_offset;  // into the flat block-table array
  int32_t n_ctx;
};

// Whether MatMul and GetRows implement weights of GGUF type number `type`.
bool SupportsWeightType(uint32_t type);
// `type` is the GGUF type number (F32 0, F16 1, Q4_0 2, Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14,
// BF16 30); other types return cudaErrorInvalidValue.
// (CudaBackend::UploadWeight refuses a weight of another type, naming it.)
cudaError_t MatMul(uint32_t type, const uint8_t* w, size_t w_stride, int64_t k, int64_t rows,
                   const float* x, int64_t n, float* y, cudaStream_t stream);
cudaError_t GetRows(uint32_t type, const uint8_t* w, size_t w_stride, int64_t k, const int32_t* ids,
                    int64_t n, float* out, cudaStream_t stream);
cudaError_t RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                    float* out, cudaStream_t stream);
cudaError_t Rope(float* x, const int32_t* pos, int64_t n, int n_heads, int head_dim, int rope_dim,
                 bool halves, const float* freq, cudaStream_t stream);
cudaError_t SiluMul(const float* gate, const float* up, int64_t count, float* out,
                    cudaStream_t stream);
cudaError_t Add(const float* x, int64_t count, float* y, cudaStream_t stream);
cudaError_t AddBias(const float* bias, int64_t n, int64_t dim, float* x, cudaStream_t stream);
cudaError_t StoreKv(const float* k, const float* v, const int64_t* slot_rows, int64_t n,
                    int n_kv_heads, int head_dim, int block_size, bool f16, void* k_pool,
                    void* v_pool, cudaStream_t stream);
cudaError_t GatherRows(const float* src, const int64_t* rows, int64_t n, int64_t dim, float* dst,
                       cudaStream_t stream);
cudaError_t Attention(const DeviceQuery* queries, int64_t n_queries, const int32_t* blocks,
                      int n_heads, int n_kv_heads, int head_dim, float scale, int block_size,
                      bool f16, const void* k_pool, const void* v_pool, cudaStream_t stream);
cudaError_t Softmax(float* x, int64_t n, int64_t dim, cudaStream_t stream);

}  // namespace cascade::cuda

#endif  // CASCADE_KERNELS_CUDA_CUDA_KERNELS_H_
