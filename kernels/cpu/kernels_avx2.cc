// AVX2 + FMA + F16C kernels. Compiled with -mavx2 -mfma -mf16c; only reached after
// run-time detection says the CPU has them. Reduction orders follow kernel_table.h.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/kernel_table.h"
#include "model/quant.h"
#include "util/fp16.h"

namespace cascade::cpu {
namespace {

// ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7))
inline float Hsum8(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 hi = _mm_movehl_ps(lo, lo);
  lo = _mm_add_ps(lo, hi);
  hi = _mm_shuffle_ps(lo, lo, 1);
  return _mm_cvtss_f32(_mm_add_ss(lo, hi));
}

inline __m256i TailMask(int64_t count) {  // lanes [0, count) set
  alignas(32) static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - count));
}

struct LoadF32 {
  static __m256 Load8(const uint8_t* row, int64_t e) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + e);
  }
  static __m256 LoadPartial(const uint8_t* row, int64_t e, int64_t count) {
    return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + e, TailMask(count));
  }
};
struct LoadF16 {
  static __m256 Load8(const uint8_t* row, int64_t e) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * e)));
  }
  static __m256 LoadPartial(const uint8_t* row, int64_t e, int64_t count) {
    alignas(16) uint16_t tmp[8] = {};
    std::memcpy(tmp, row + 2 * e, 2 * count);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(tmp)));
  }
};
struct LoadBF16 {
  static __m256 Load8(const uint8_t* row, int64_t e) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * e));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static __m256 LoadPartial(const uint8_t* row, int64_t e, int64_t count) {
    alignas(16) uint16_t tmp[8] = {};
    std::memcpy(tmp, row + 2 * e, 2 * count);
    __m128i h = _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};

// One R x T tile of a float-activation matmul: rows w[0..R), activation rows x[0..T).
template <typename L, int R, int T>
inline void F32Tile(const uint8_t* const* w, const float* const* x, int64_t k, float* y,
                    int64_t ldy) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < T; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  int64_t e = 0;
  for (; e + 8 <= k; e += 8) {
    __m256 xv[T];
    for (int c = 0; c < T; ++c) xv[c] = _mm256_loadu_ps(x[c] + e);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = L::Load8(w[r], e);
      for (int c = 0; c < T; ++c) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
    }
  }
  if (e < k) {
    const int64_t rem = k - e;
    __m256 xv[T];
    for (int c = 0; c < T; ++c) xv[c] = _mm256_maskload_ps(x[c] + e, TailMask(rem));
    for (int r = 0; r < R; ++r) {
      const __m256 wv = L::LoadPartial(w[r], e, rem);
      for (int c = 0; c < T; ++c) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < T; ++c) y[c * ldy + r] = Hsum8(acc[r][c]);
  }
}

template <typename L, int R>
void F32RowsAllTokens(const uint8_t* const* w, const MatmulTask& t, int64_t r) {
  float* y = t.y + r;
  int64_t i = 0;
  auto xrow = [&](int64_t j) { return reinterpret_cast<const float*>(t.x + j * t.x_stride); };
  for (; i + 3 <= t.n; i += 3) {
    const float* x[3] = {xrow(i), xrow(i + 1), xrow(i + 2)};
    F32Tile<L, R, 3>(w, x, t.k, y + i * t.ldy, t.ldy);
  }
  for (; i < t.n; ++i) {
    const float* x[1] = {xrow(i)};
    F32Tile<L, R, 1>(w, x, t.k, y + i * t.ldy, t.ldy);
  }
}

template <typename L>
void MatmulF32Act(const MatmulTask& t) {
  int64_t r = t.r0;
  const uint8_t* w[8];
  if (t.n == 1) {  // decode: more rows in flight to hide FMA latency
    for (; r + 8 <= t.r1; r += 8) {
      for (int j = 0; j < 8; ++j) w[j] = t.w + (r + j) * t.w_stride;
      F32RowsAllTokens<L, 8>(w, t, r);
    }
  }
  for (; r + 4 <= t.r1; r += 4) {
    for (int j = 0; j < 4; ++j) w[j] = t.w + (r + j) * t.w_stride;
    F32RowsAllTokens<L, 4>(w, t, r);
  }
  for (; r < t.r1; ++r) {
    w[0] = t.w + r * t.w_stride;
    F32RowsAllTokens<L, 1>(w, t, r);
  }
}

// Quantized weights with float activations: dequantize up to kScratchRows rows exactly,
// then run the float tiles on them.
template <TensorType kType>
void MatmulDequantF32(const MatmulTask& t) {
  const uint8_t* w[kScratchRows];
  for (int64_t r = t.r0; r < t.r1; r += 4) {
    const int rows = static_cast<int>(std::min<int64_t>(4, t.r1 - r));
    for (int j = 0; j < rows; ++j) {
      DequantizeRow(kType, t.w + (r + j) * t.w_stride, t.k, t.scratch + j * t.k);
      w[j] = reinterpret_cast<const uint8_t*>(t.scratch + j * t.k);
    }
    if (rows == 4) {
      F32RowsAllTokens<LoadF32, 4>(w, t, r);
    } else {
      for (int j = 0; j < rows; ++j) F32RowsAllTokens<LoadF32, 1>(w + j, t, r + j);
    }
  }
}

// 32 signed codes of a weight block.
inline __m256i Codes(const BlockQ8_0& b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
}
inline __m256i Codes(const BlockQ4_0& b) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

// 8 int32 lanes: lane l = sum of a[e] * b[e] for e in [4l, 4l+4).
inline __m256i DotI8(__m256i a, __m256i b) {
  const __m256i ua = _mm256_sign_epi8(a, a);
  const __m256i sb = _mm256_sign_epi8(b, a);
  const __m256i p16 = _mm256_maddubs_epi16(ua, sb);
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

template <typename Block, int R, int T>
inline void Q8Tile(const Block* const* w, const BlockQ8_0* const* x, int64_t nb, float* y,
                   int64_t ldy) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < T; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    __m256i xq[T];
    float xd[T];
    for (int c = 0; c < T; ++c) {
      xq[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[c][b].qs));
      xd[c] = _cvtsh_ss(x[c][b].d);
    }
    for (int r = 0; r < R; ++r) {
      const __m256i wq = Codes(w[r][b]);
      const float wd = _cvtsh_ss(w[r][b].d);
      for (int c = 0; c < T; ++c) {
        const __m256 s = _mm256_cvtepi32_ps(DotI8(wq, xq[c]));
        acc[r][c] = _mm256_fmadd_ps(s, _mm256_set1_ps(wd * xd[c]), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < T; ++c) y[c * ldy + r] = Hsum8(acc[r][c]);
  }
}

template <typename Block, int R>
void Q8RowsAllTokens(const Block* const* w, const MatmulTask& t, int64_t r) {
  const int64_t nb = t.k / kQK;
  auto xrow = [&](int64_t j) { return reinterpret_cast<const BlockQ8_0*>(t.x + j * t.x_stride); };
  int64_t i = 0;
  for (; i + 2 <= t.n; i += 2) {
    const BlockQ8_0* x[2] = {xrow(i), xrow(i + 1)};
    Q8Tile<Block, R, 2>(w, x, nb, t.y + i * t.ldy + r, t.ldy);
  }
  for (; i < t.n; ++i) {
    const BlockQ8_0* x[1] = {xrow(i)};
    Q8Tile<Block, R, 1>(w, x, nb, t.y + i * t.ldy + r, t.ldy);
  }
}

template <typename Block>
void MatmulQ8_0Act(const MatmulTask& t) {
  const Block* w[4];
  int64_t r = t.r0;
  for (; r + 4 <= t.r1; r += 4) {
    for (int j = 0; j < 4; ++j) w[j] = reinterpret_cast<const Block*>(t.w + (r + j) * t.w_stride);
    Q8RowsAllTokens<Block, 4>(w, t, r);
  }
  for (; r < t.r1; ++r) {
    w[0] = reinterpret_cast<const Block*>(t.w + r * t.w_stride);
    Q8RowsAllTokens<Block, 1>(w, t, r);
  }
}

MatmulFn Avx2Matmul(TensorType type, ActFormat act) {
  if (act == ActFormat::kF32) {
    switch (type) {
      case TensorType::kF32:
        return &MatmulF32Act<LoadF32>;
      case TensorType::kF16:
        return &MatmulF32Act<LoadF16>;
      case TensorType::kBF16:
        return &MatmulF32Act<LoadBF16>;
      case TensorType::kQ4_0:
        return &MatmulDequantF32<TensorType::kQ4_0>;
      case TensorType::kQ8_0:
        return &MatmulDequantF32<TensorType::kQ8_0>;
      case TensorType::kQ4_K:
        return &MatmulDequantF32<TensorType::kQ4_K>;
      case TensorType::kQ5_K:
        return &MatmulDequantF32<TensorType::kQ5_K>;
      case TensorType::kQ6_K:
        return &MatmulDequantF32<TensorType::kQ6_K>;
      default:
        return nullptr;
    }
  }
  if (act == ActFormat::kQ8_0) {
    if (type == TensorType::kQ8_0) return &MatmulQ8_0Act<BlockQ8_0>;
    if (type == TensorType::kQ4_0) return &MatmulQ8_0Act<BlockQ4_0>;
    return nullptr;
  }
  return ScalarKernels().matmul(type, act);  // K-quants: portable path for now
}

void QuantizeQ8_0Row(const float* x, int64_t k, void* out) {
  auto* y = static_cast<BlockQ8_0*>(out);
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < k / kQK; ++b, x += kQK) {
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(x + 8 * j);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_mask, v[j]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float d = _mm_cvtss_f32(m4) / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = FloatToFp16(d);
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int j = 0; j < 4; ++j) {
      q[j] = _mm256_cvtps_epi32(
          _mm256_round_ps(_mm256_mul_ps(v[j], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    // int32 -> int8 with lane order restored after the in-lane packs.
    __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
    __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), p);
  }
}

float Dot(const float* a, const float* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t e = 0;
  for (; e + 8 <= n; e += 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + e), _mm256_loadu_ps(b + e), acc);
  }
  if (e < n) {
    const __m256i m = TailMask(n - e);
    acc = _mm256_fmadd_ps(_mm256_maskload_ps(a + e, m), _mm256_maskload_ps(b + e, m), acc);
  }
  return Hsum8(acc);
}

void Axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

void Scale(float a, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= a;
}

float SumSquares(const float* x, int64_t n) { return Dot(x, x, n); }

}  // namespace

const KernelTable& Avx2Kernels() {
  static const KernelTable table{
      CpuIsa::kAvx2, &Avx2Matmul, &QuantizeQ8_0Row, ScalarKernels().quantize_q8k,
      &Dot,          &Axpy,       &Scale,           &SumSquares};
  return table;
}

}  // namespace cascade::cpu
