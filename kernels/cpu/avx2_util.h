// Internal: AVX2 helpers and the entry points shared by the AVX2 kernel files
// (kernels_avx2.cc: float activations and the table; kernels_avx2_quant.cc: Q8_0/Q4_0
// weights x Q8_0 activations; kernels_avx2_legacy.cc: Q4_1/Q5_0/Q5_1 x Q8_0 activations;
// kernels_avx2_kquant.cc: K-quant weights x Q8_K activations; kernels_avx2_attention.cc: attention
// and SiLU-mul).
//
// Contract: include only from translation units compiled with CASCADE_AVX2_FLAGS, and call
// only after run-time detection found AVX2+FMA+F16C (kernel_table.h). Every matmul here keeps
// the batch-invariance rule of kernel_table.h: each output element is reduced in an order
// fixed by the row length and the weight type, whatever tile, n or row range computes it.
#ifndef CASCADE_KERNELS_CPU_AVX2_UTIL_H_
#define CASCADE_KERNELS_CPU_AVX2_UTIL_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/gemm_layout.h"  // EqualTokenBlock, shared with the AVX-512 kernels
#include "kernels/cpu/kernel_table.h"
#include "tensor/quant.h"  // kIq4Levels

namespace cascade::cpu::avx2 {

// Entry points implemented in the quantized kernel files.
MatmulFn QuantMatmul(TensorType type);   // Q8_0 / Q4_0 weights x Q8_0 activations
MatmulFn LegacyQuantMatmul(TensorType type);  // Q4_1 / Q5_0 / Q5_1 / IQ4_XS x Q8_0 activations
MatmulFn KQuantMatmul(TensorType type);  // Q4_K / Q5_K / Q6_K weights x Q8_K activations
void QuantizeQ8_0Row(const float* x, int64_t k, void* out);
void QuantizeQ8KRow(const float* x, int64_t k, void* out);
// kernels_avx2_attention.cc
void SiluMul(const float* gate, const float* up, int64_t n, float* out);
void GeluMul(const float* gate, const float* up, int64_t n, float* out);
void FloatRowToHalf(const float* x, int64_t n, uint16_t* out);  // F16C, as FloatToFp16
void AttentionGroup(const AttentionParams& p, const AttentionQuery* qs, int n, int kv_head,
                    float* scratch);

// The 4-row tiles' rows from r: w[0..4) point at rows r.. of the task's weights, the last
// real row repeated where fewer than 4 remain; returns how many are real.
template <typename Block>
int RowGroup4(const MatmulTask& t, int64_t r, const Block* w[4]) {
  const int rows = static_cast<int>(std::min<int64_t>(4, t.r1 - r));
  for (int j = 0; j < 4; ++j) {
    w[j] = reinterpret_cast<const Block*>(t.w + (r + std::min(j, rows - 1)) * t.w_stride);
  }
  return rows;
}

// The 4-row tiles' epilogue: acc[j] holds 4 rows' outputs for token j; the first `rows` of
// them go to y[j * ldy + r] (a last group may repeat its last row to fill the tile).
inline void StoreRows4(const __m128* acc, int tokens, int rows, float* y, int64_t ldy) {
  for (int j = 0; j < tokens; ++j) {
    alignas(16) float out[4];
    _mm_store_ps(out, acc[j]);
    for (int r = 0; r < rows; ++r) y[j * ldy + r] = out[r];
  }
}

// ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)), the canonical lane reduction.
inline float Hsum8(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 hi = _mm_movehl_ps(lo, lo);
  lo = _mm_add_ps(lo, hi);
  hi = _mm_shuffle_ps(lo, lo, 1);
  return _mm_cvtss_f32(_mm_add_ss(lo, hi));
}

// Sum of 8 int32 lanes (exact).
inline int32_t HsumI32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

inline __m256i TailMask(int64_t count) {  // int32 lanes [0, count) set, count in [0, 8]
  alignas(32) static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - count));
}

// Canonical-order dot product: 8 FMA lanes in element order, masked tail, Hsum8.
inline float Dot(const float* a, const float* b, int64_t n) {
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

// y *= a, elementwise.
inline void Scale(float a, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= a;
}

// 8 int32 lanes: lane l = sum of a[e] * b[e] for e in [4l, 4l + 4), for signed weights a
// (any int8) and activations b in [-127, 127] (what the activation quantizers produce):
// |a| * b fits, and pairs of products stay below 2^15, so maddubs never saturates.
// abs_a = |a| (_mm256_sign_epi8(a, a)), taken once when a meets several b.
inline __m256i DotI8(__m256i a, __m256i abs_a, __m256i b) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(abs_a, _mm256_sign_epi8(b, a)),
                           _mm256_set1_epi16(1));
}

// The 32 nibbles of a 32-element block's 16 bytes qs as unsigned bytes in element order
// (low nibbles, then high). The 16 bytes go to both halves (a plain load), the upper half
// shifted right by 4 bits per 32-bit lane; masking each byte to 4 bits then leaves the low
// nibbles below and the high nibbles above.
inline __m256i Nibbles32(const uint8_t* qs) {
  const __m256i both =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi32(both, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                          _mm256_set1_epi8(0x0F));
}

// The fifth bits of a block's 32 codes (bit j of the little-endian qh) as 0 or 16 per byte.
inline __m256i FifthBits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  // Bytes 0-7 take qh byte 0, 8-15 byte 1 (low half); 16-23 byte 2, 24-31 byte 3.
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(bits)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                          _mm256_set1_epi8(0x10));
}

// The signed levels (tensor/quant.h kIq4Levels) of 32 IQ4 indices packed as Q4_0's
// nibbles, in element order: one byte shuffle of the nibbles.
inline __m256i Iq4Levels32(const uint8_t* qs) {
  const __m256i levels = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Levels)));
  return _mm256_shuffle_epi8(levels, Nibbles32(qs));
}

// DotI8 for unsigned weight codes u in [0, 31] (nibbles, 5-bit codes): no sign fix-ups;
// |u * x| pairs stay below 2^15.
inline __m256i PartialU(__m256i u, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
}

// Totals of four 8-lane partial sums: lane j of the result is the sum of p[j]'s lanes.
inline __m128i Totals4(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// Transposes 8 rows of 8 int32 lanes (row r: e.g. the 8 four-byte code groups of one
// weight row's block) into 8 registers, register g holding lane g of rows 0..7.
inline void Transpose8x8(const __m256i* v, __m256i* o) {
  const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
  const __m256i t4 = _mm256_unpacklo_epi32(v[4], v[5]), t5 = _mm256_unpackhi_epi32(v[4], v[5]);
  const __m256i t6 = _mm256_unpacklo_epi32(v[6], v[7]), t7 = _mm256_unpackhi_epi32(v[6], v[7]);
  // u0: groups 0 | 4 of rows 0-3; u1: 1 | 5; u2: 2 | 6; u3: 3 | 7 (u4..u7: rows 4-7).
  const __m256i u[8] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                        _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3),
                        _mm256_unpacklo_epi64(t4, t6), _mm256_unpackhi_epi64(t4, t6),
                        _mm256_unpacklo_epi64(t5, t7), _mm256_unpackhi_epi64(t5, t7)};
  for (int g = 0; g < 4; ++g) {
    o[g] = _mm256_permute2x128_si256(u[g], u[g + 4], 0x20);
    o[g + 4] = _mm256_permute2x128_si256(u[g], u[g + 4], 0x31);
  }
}

// Calls tile.template operator()<T>(i) over tokens [i0, i1): tiles of kTile tokens, then
// one tile of the remaining 1 .. kTile - 1 (tile is a lambda templated on its width).
template <int kTile, typename F>
inline void SweepTiles(int64_t i0, int64_t i1, F&& tile) {
  static_assert(kTile >= 1 && kTile <= 4, "remainder tiles of 1 to 3 tokens");
  int64_t i = i0;
  for (; i + kTile <= i1; i += kTile) tile.template operator()<kTile>(i);
  switch (i1 - i) {
    case 3:
      if constexpr (kTile > 3) tile.template operator()<3>(i);
      break;
    case 2:
      if constexpr (kTile > 2) tile.template operator()<2>(i);
      break;
    case 1:
      if constexpr (kTile > 1) tile.template operator()<1>(i);
      break;
    default:
      break;
  }
}

}  // namespace cascade::cpu::avx2

#endif  // CASCADE_KERNELS_CPU_AVX2_UTIL_H_
