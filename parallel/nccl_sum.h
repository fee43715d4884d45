// The fixed-order sum of the NCCL all-reduce, on the GPU: out[i] = ((parts[0][i] +
// parts[1][i]) + ...) for n parts of count floats, one after another (parallel/
// nccl_collective.h). Plain C++17 (compiled by nvcc).
#ifndef CASCADE_PARALLEL_NCCL_SUM_H_
#define CASCADE_PARALLEL_NCCL_SUM_H_

#include <cstdint>

#include <cuda_runtime.h>

namespace cascade::nccl {

cudaError_t SumPartsInRankOrder(const float* parts, int n, int64_t count, float* out,
                                cudaStream_t stream);

}  // namespace cascade::nccl

#endif  // CASCADE_PARALLEL_NCCL_SUM_H_
