// CUDA kernels. Written for clarity and determinism first: every reduction has a fixed
// order (lane-strided partial sums, then a fixed shuffle tree), so a sequence's results do
// not depend on its batch. Tensor-core GEMMs for large prefill batches come later.
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_kernels.h"
#include "tensor/quant.h"

namespace cascade::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kTokensPerWarp = 4;  // activation rows sharing one pass over a weight row

__device__ inline float Half(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ inline float Bf16(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

__device__ inline float WarpSum(float v) {
  // Fixed butterfly order: the same for every launch.
  for (int off = kWarp / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Element e of a row of weight type T (dequantized exactly).
template <int T>
__device__ inline float WeightAt(const uint8_t* row, int64_t e);

template <>
__device__ inline float WeightAt<0>(const uint8_t* row, int64_t e) {  // F32
  return reinterpret_cast<const float*>(row)[e];
}
template <>
__device__ inline float WeightAt<1>(const uint8_t* row, int64_t e) {  // F16
  return Half(reinterpret_cast<const uint16_t*>(row)[e]);
}
template <>
__device__ inline float WeightAt<30>(const uint8_t* row, int64_t e) {  // BF16
  return Bf16(reinterpret_cast<const uint16_t*>(row)[e]);
}
template <>
__device__ inline float WeightAt<8>(const uint8_t* row, int64_t e) {  // Q8_0
  const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + e / 32;
  return Half(b->d) * b->qs[e % 32];
}
template <>
__device__ inline float WeightAt<2>(const uint8_t* row, int64_t e) {  // Q4_0
  const auto* b = reinterpret_cast<const BlockQ4_0*>(row) + e / 32;
  const int j = e % 32;
  const int q = j < 16 ? (b->qs[j] & 0x0F) : (b->qs[j - 16] >> 4);
  return Half(b->d) * (q - 8);
}
__device__ inline void ScaleMinK4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
template <>
__device__ inline float WeightAt<12>(const uint8_t* row, int64_t e) {  // Q4_K
  const auto* b = reinterpret_cast<const BlockQ4K*>(row) + e / 256;
  const int i = e % 256, g = i / 32, l = i % 32;
  int sc, m;
  ScaleMinK4(g, b->scales, &sc, &m);
  const uint8_t byte = b->qs[32 * (g / 2) + l];
  const int q = (g % 2) ? (byte >> 4) : (byte & 0xF);
  return Half(b->d) * sc * q - Half(b->dmin) * m;
}
template <>
__device__ inline float WeightAt<13>(const uint8_t* row, int64_t e) {  // Q5_K
  const auto* b = reinterpret_cast<const BlockQ5K*>(row) + e / 256;
  const int i = e % 256, g = i / 32, l = i % 32;
  int sc, m;
  ScaleMinK4(g, b->scales, &sc, &m);
  const uint8_t byte = b->qs[32 * (g / 2) + l];
  const int q = ((g % 2) ? (byte >> 4) : (byte & 0xF)) + (((b->qh[l] >> g) & 1) ? 16 : 0);
  return Half(b->d) * sc * q - Half(b->dmin) * m;
}
template <>
__device__ inline float WeightAt<14>(const uint8_t* row, int64_t e) {  // Q6_K
  const auto* b = reinterpret_cast<const BlockQ6K*>(row) + e / 256;
  const int i = e % 256, h = i / 128, w = i % 128, quarter = w / 32, l = w % 32;
  const uint8_t lo = b->ql[64 * h + l + ((quarter & 1) ? 32 : 0)];
  const int low = quarter < 2 ? (lo & 0xF) : (lo >> 4);
  const int high = (b->qh[32 * h + l] >> (2 * quarter)) & 3;
  return Half(b->d) * b->scales[i / 16] * ((low | (high << 4)) - 32);
}

// y[t][r] = dot(W[r], x[t]). One warp per (row, group of kTokensPerWarp tokens). Lane l
// sums elements e = l, l + 32, ... in order; then a fixed shuffle tree.
template <int T>
__global__ void MatMulKernel(const uint8_t* w, size_t w_stride, int64_t k, const float* x,
                             int64_t n, float* y, int64_t rows) {
  const int lane = threadIdx.x;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kTokensPerWarp;
  if (r >= rows) return;
  const uint8_t* wr = w + r * w_stride;
  float acc[kTokensPerWarp] = {};
  for (int64_t e = lane; e < k; e += kWarp) {
    const float wv = WeightAt<T>(wr, e);
#pragma unroll
    for (int j = 0; j < kTokensPerWarp; ++j) {
      if (t0 + j < n) acc[j] += wv * x[(t0 + j) * k + e];
    }
  }
#pragma unroll
  for (int j = 0; j < kTokensPerWarp; ++j) {
    const float s = WarpSum(acc[j]);
    if (lane == 0 && t0 + j < n) y[(t0 + j) * rows + r] = s;
  }
}

template <int T>
__global__ void GetRowsKernel(const uint8_t* w, size_t w_stride, int64_t k, const int32_t* ids,
                              float* out) {
  const int64_t i = blockIdx.x;
  const uint8_t* row = w + static_cast<int64_t>(ids[i]) * w_stride;
  for (int64_t e = threadIdx.x; e < k; e += blockDim.x) out[i * k + e] = WeightAt<T>(row, e);
}

// Block-wide sum with a fixed tree (blockDim.x a multiple of 32, at most 1024).
__device__ float BlockSum(float v, float* shared) {
  v = WarpSum(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  v = lane < warps ? shared[lane] : 0.0f;
  if (warp == 0) v = WarpSum(v);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}

__device__ float BlockMax(float v, float* shared) {
  for (int off = kWarp / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  v = lane < warps ? shared[lane] : -INFINITY;
  if (warp == 0) {
    for (int off = kWarp / 2; off > 0; off >>= 1)
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  }
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}

__global__ void RmsNormKernel(const float* x, const float* weight, int64_t dim, float eps,
                              float* out) {
  __shared__ float shared[32];
  const float* xi = x + blockIdx.x * dim;
  float* oi = out + blockIdx.x * dim;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) ss += xi[j] * xi[j];
  ss = BlockSum(ss, shared);
  const float inv = rsqrtf(ss / static_cast<float>(dim) + eps);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) oi[j] = xi[j] * inv * weight[j];
}

__global__ void RopeKernel(float* x, const int32_t* pos, int n_heads, int head_dim, int rope_dim,
                           bool halves, const float* freq) {
  const int64_t i = blockIdx.x;
  const int half = rope_dim / 2;
  for (int idx = threadIdx.x; idx < n_heads * half; idx += blockDim.x) {
    const int h = idx / half, j = idx % half;
    float* v = x + (i * n_heads + h) * head_dim;
    const int a = halves ? j : 2 * j, b = halves ? j + half : 2 * j + 1;
    double s, c;
    sincos(static_cast<double>(pos[i]) * static_cast<double>(freq[j]), &s, &c);
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * static_cast<float>(c) - x1 * static_cast<float>(s);
    v[b] = x0 * static_cast<float>(s) + x1 * static_cast<float>(c);
  }
}

__global__ void SiluMulKernel(const float* gate, const float* up, int64_t count, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void AddKernel(const float* x, int64_t count, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) y[i] += x[i];
}

__global__ void AddBiasKernel(const float* bias, int64_t count, int64_t dim, float* x) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) x[i] += bias[i % dim];
}

// A KV cache element: F32 as is, F16 rounded to nearest even on the way in, exact out.
__device__ __forceinline__ void StoreElem(float* p, float x) { *p = x; }
__device__ __forceinline__ void StoreElem(__half* p, float x) { *p = __float2half_rn(x); }
__device__ __forceinline__ float LoadElem(const float* p) { return *p; }
__device__ __forceinline__ float LoadElem(const __half* p) { return __half2float(*p); }

// Token i's keys and values (n_kv_heads * head_dim) to its slot row, in the (block, KV
// head, position, element) layout of KvLayout.
template <typename T>
__global__ void StoreKvKernel(const float* k, const float* v, const int64_t* slot_rows,
                              int n_kv_heads, int head_dim, int block_size, T* k_pool, T* v_pool) {
  const int64_t i = blockIdx.x;
  const int64_t kv_dim = static_cast<int64_t>(n_kv_heads) * head_dim;
  const int64_t block = slot_rows[i] / block_size, pos = slot_rows[i] % block_size;
  for (int64_t j = threadIdx.x; j < kv_dim; j += blockDim.x) {
    const int64_t h = j / head_dim, e = j % head_dim;
    const int64_t at = ((block * n_kv_heads + h) * block_size + pos) * head_dim + e;
    StoreElem(k_pool + at, k[i * kv_dim + j]);
    StoreElem(v_pool + at, v[i * kv_dim + j]);
  }
}

__global__ void GatherRowsKernel(const float* src, const int64_t* rows, int64_t dim, float* dst) {
  const int64_t i = blockIdx.x;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) dst[i * dim + j] = src[rows[i] * dim + j];
}

// One thread block per (query, head); one thread per output dimension. Positions are
// visited in order with an online softmax, as on the CPU.
template <typename T>
__global__ void AttentionKernel(const DeviceQuery* queries, const int32_t* blocks, int n_heads,
                                int n_kv_heads, int head_dim, float scale, int block_size,
                                const T* k_pool, const T* v_pool) {
  __shared__ float shared[32];
  const DeviceQuery qd = queries[blockIdx.x];
  const int h = blockIdx.y;
  const int kvh = h / (n_heads / n_kv_heads);
  const int d = threadIdx.x;
  const float qv = d < head_dim ? qd.q[h * head_dim + d] : 0.0f;
  float m = -INFINITY, l = 0.0f, acc = 0.0f;
  for (int32_t p = 0; p < qd.n_ctx; ++p) {
    const int32_t block = blocks[qd.blocks_offset + p / block_size];
    const int64_t row =
        ((static_cast<int64_t>(block) * n_kv_heads + kvh) * block_size + p % block_size) * head_dim;
    const float s = BlockSum(d < head_dim ? qv * LoadElem(k_pool + row + d) : 0.0f, shared) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);
    const float w = expf(s - m_new);
    l = l * corr + w;
    acc = acc * corr + (d < head_dim ? w * LoadElem(v_pool + row + d) : 0.0f);
    m = m_new;
  }
  if (d < head_dim) qd.out[h * head_dim + d] = l > 0 ? acc / l : 0.0f;
}

__global__ void SoftmaxKernel(float* x, int64_t dim) {
  __shared__ float shared[32];
  float* r = x + blockIdx.x * dim;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) mx = fmaxf(mx, r[j]);
  mx = BlockMax(mx, shared);
  float sum = 0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) sum += expf(r[j] - mx);
  sum = BlockSum(sum, shared);
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) r[j] = expf(r[j] - mx) / sum;
}

inline unsigned Blocks(int64_t count, int threads) {
  return static_cast<unsigned>((count + threads - 1) / threads);
}

int ThreadsFor(int64_t dim) {
  int t = 32;
  while (t < dim && t < 1024) t *= 2;
  return t;
}

}  // namespace

namespace {
template <int T>
cudaError_t LaunchMatMul(const uint8_t* w, size_t stride, int64_t k, int64_t rows, const float* x,
                         int64_t n, float* y, cudaStream_t s) {
  dim3 block(kWarp, 8);
  dim3 grid(Blocks(rows, 8), Blocks(n, kTokensPerWarp));
  MatMulKernel<T><<<grid, block, 0, s>>>(w, stride, k, x, n, y, rows);
  return cudaGetLastError();
}
template <int T>
cudaError_t LaunchGetRows(const uint8_t* w, size_t stride, int64_t k, const int32_t* ids, int64_t n,
                          float* out, cudaStream_t s) {
  GetRowsKernel<T><<<static_cast<unsigned>(n), 256, 0, s>>>(w, stride, k, ids, out);
  return cudaGetLastError();
}
}  // namespace

bool SupportsWeightType(uint32_t type) {
  switch (type) {
    case 0:
    case 1:
    case 30:
    case 8:
    case 2:
    case 12:
    case 13:
    case 14:
      return true;
    default:
      return false;
  }
}

cudaError_t MatMul(uint32_t type, const uint8_t* w, size_t w_stride, int64_t k, int64_t rows,
                   const float* x, int64_t n, float* y, cudaStream_t s) {
  switch (type) {
    case 0:
      return LaunchMatMul<0>(w, w_stride, k, rows, x, n, y, s);
    case 1:
      return LaunchMatMul<1>(w, w_stride, k, rows, x, n, y, s);
    case 30:
      return LaunchMatMul<30>(w, w_stride, k, rows, x, n, y, s);
    case 8:
      return LaunchMatMul<8>(w, w_stride, k, rows, x, n, y, s);
    case 2:
      return LaunchMatMul<2>(w, w_stride, k, rows, x, n, y, s);
    case 12:
      return LaunchMatMul<12>(w, w_stride, k, rows, x, n, y, s);
    case 13:
      return LaunchMatMul<13>(w, w_stride, k, rows, x, n, y, s);
    case 14:
      return LaunchMatMul<14>(w, w_stride, k, rows, x, n, y, s);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t GetRows(uint32_t type, const uint8_t* w, size_t w_stride, int64_t k, const int32_t* ids,
                    int64_t n, float* out, cudaStream_t s) {
  switch (type) {
    case 0:
      return LaunchGetRows<0>(w, w_stride, k, ids, n, out, s);
    case 1:
      return LaunchGetRows<1>(w, w_stride, k, ids, n, out, s);
    case 30:
      return LaunchGetRows<30>(w, w_stride, k, ids, n, out, s);
    case 8:
      return LaunchGetRows<8>(w, w_stride, k, ids, n, out, s);
    case 2:
      return LaunchGetRows<2>(w, w_stride, k, ids, n, out, s);
    case 12:
      return LaunchGetRows<12>(w, w_stride, k, ids, n, out, s);
    case 13:
      return LaunchGetRows<13>(w, w_stride, k, ids, n, out, s);
    case 14:
      return LaunchGetRows<14>(w, w_stride, k, ids, n, out, s);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                    float* out, cudaStream_t s) {
  RmsNormKernel<<<static_cast<unsigned>(n), ThreadsFor(dim), 0, s>>>(x, weight, dim, eps, out);
  return cudaGetLastError();
}

cudaError_t Rope(float* x, const int32_t* pos, int64_t n, int n_heads, int head_dim, int rope_dim,
                 bool halves, const float* freq, cudaStream_t s) {
  RopeKernel<<<static_cast<unsigned>(n), 128, 0, s>>>(x, pos, n_heads, head_dim, rope_dim, halves,
                                                      freq);
  return cudaGetLastError();
}

cudaError_t SiluMul(const float* gate, const float* up, int64_t count, float* out, cudaStream_t s) {
  SiluMulKernel<<<Blocks(count, 256), 256, 0, s>>>(gate, up, count, out);
  return cudaGetLastError();
}

cudaError_t Add(const float* x, int64_t count, float* y, cudaStream_t s) {
  AddKernel<<<Blocks(count, 256), 256, 0, s>>>(x, count, y);
  return cudaGetLastError();
}

cudaError_t AddBias(const float* bias, int64_t n, int64_t dim, float* x, cudaStream_t s) {
  AddBiasKernel<<<Blocks(n * dim, 256), 256, 0, s>>>(bias, n * dim, dim, x);
  return cudaGetLastError();
}

cudaError_t StoreKv(const float* k, const float* v, const int64_t* slot_rows, int64_t n,
                    int n_kv_heads, int head_dim, int block_size, bool f16, void* k_pool,
                    void* v_pool, cudaStream_t s) {
  if (f16) {
    StoreKvKernel<<<static_cast<unsigned>(n), 128, 0, s>>>(
        k, v, slot_rows, n_kv_heads, head_dim, block_size, static_cast<__half*>(k_pool),
        static_cast<__half*>(v_pool));
  } else {
    StoreKvKernel<<<static_cast<unsigned>(n), 128, 0, s>>>(
        k, v, slot_rows, n_kv_heads, head_dim, block_size, static_cast<float*>(k_pool),
        static_cast<float*>(v_pool));
  }
  return cudaGetLastError();
}

cudaError_t GatherRows(const float* src, const int64_t* rows, int64_t n, int64_t dim, float* dst,
                       cudaStream_t s) {
  GatherRowsKernel<<<static_cast<unsigned>(n), 256, 0, s>>>(src, rows, dim, dst);
  return cudaGetLastError();
}

cudaError_t Attention(const DeviceQuery* queries, int64_t n_queries, const int32_t* blocks,
                      int n_heads, int n_kv_heads, int head_dim, float scale, int block_size,
                      bool f16, const void* k_pool, const void* v_pool, cudaStream_t s) {
  dim3 grid(static_cast<unsigned>(n_queries), static_cast<unsigned>(n_heads));
  if (f16) {
    AttentionKernel<<<grid, ThreadsFor(head_dim), 0, s>>>(
        queries, blocks, n_heads, n_kv_heads, head_dim, scale, block_size,
        static_cast<const __half*>(k_pool), static_cast<const __half*>(v_pool));
  } else {
    AttentionKernel<<<grid, ThreadsFor(head_dim), 0, s>>>(
        queries, blocks, n_heads, n_kv_heads, head_dim, scale, block_size,
        static_cast<const float*>(k_pool), static_cast<const float*>(v_pool));
  }
  return cudaGetLastError();
}

cudaError_t Softmax(float* x, int64_t n, int64_t dim, cudaStream_t s) {
  SoftmaxKernel<<<static_cast<unsigned>(n), ThreadsFor(dim), 0, s>>>(x, dim);
  return cudaGetLastError();
}

}  // namespace cascade::cuda
