#include "parallel/nccl_sum.h"

namespace cascade::nccl {
namespace {

__global__ void SumParts(const float* parts, int n, int64_t count, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = parts[i];
    for (int r = 1; r < n; ++r) s += parts[r * count + i];  // rank order, always
    out[i] = s;
  }
}

}  // namespace

cudaError_t SumPartsInRankOrder(const float* parts, int n, int64_t count, float* out,
                                cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks64 = (count + threads - 1) / threads;
  const int blocks = static_cast<int>(blocks64 < 65535 ? blocks64 : 65535);
  SumParts<<<blocks, threads, 0, stream>>>(parts, n, count, out);
  return cudaGetLastError();
}

}  // namespace cascade::nccl
