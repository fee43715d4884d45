// Internal: the AVX2 unpacking of one K-quant super-block (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)
// that every AVX2 K-quant tile reads (kernels_avx2_kquant.cc).
//
// Contract: include only from translation units compiled with CASCADE_AVX2_FLAGS. An
// unpacked block gives, for chunk j (elements 32j .. 32j + 31), Codes(j): 32 unsigned codes
// (signed formats offset to be non-negative, the offset times the scales taken out as the
// min term M); Scales(j): the int16 madd vector of the chunk's sub-block scales (lanes
// 0-7 the first 16 elements, 8-15 the next); mins: the 16 int16 values multiplying the
// activation bsums for M; d, dmin; kHasMin (M scaled by dmin, else subtracted from S).
#ifndef CASCADE_KERNELS_CPU_KQUANT_UNPACK_AVX2_H_
#define CASCADE_KERNELS_CPU_KQUANT_UNPACK_AVX2_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "tensor/quant.h"

namespace cascade::cpu::avx2 {

// pshufb masks that broadcast int16 element j (of each 128-bit lane) to the whole lane.
alignas(32) inline const uint8_t kBcast16[8][32] = {
#define CASCADE_B(j)                                                                              \
  {                                                                                               \
    2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1,     \
        2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, \
        2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, \
        2 * j, 2 * j + 1                                                                          \
  }
    CASCADE_B(0), CASCADE_B(1), CASCADE_B(2), CASCADE_B(3),
    CASCADE_B(4), CASCADE_B(5), CASCADE_B(6), CASCADE_B(7),
#undef CASCADE_B
};
// pshufb masks: lane 0 broadcasts int16 element 2m, lane 1 element 2m + 1 (m = 0..3).
alignas(32) inline const uint8_t kPair16[4][32] = {
#define CASCADE_P(m)                                                                            \
  {                                                                                             \
    4 * m, 4 * m + 1, 4 * m, 4 * m + 1, 4 * m, 4 * m + 1, 4 * m, 4 * m + 1, 4 * m, 4 * m + 1,   \
        4 * m, 4 * m + 1, 4 * m, 4 * m + 1, 4 * m, 4 * m + 1, 4 * m + 2, 4 * m + 3, 4 * m + 2,  \
        4 * m + 3, 4 * m + 2, 4 * m + 3, 4 * m + 2, 4 * m + 3, 4 * m + 2, 4 * m + 3, 4 * m + 2, \
        4 * m + 3, 4 * m + 2, 4 * m + 3, 4 * m + 2, 4 * m + 3                                   \
  }
    CASCADE_P(0),
    CASCADE_P(1),
    CASCADE_P(2),
    CASCADE_P(3),
#undef CASCADE_P
};

inline __m256i Shuffle(__m256i v, const uint8_t* mask) {
  return _mm256_shuffle_epi8(v, _mm256_load_si256(reinterpret_cast<const __m256i*>(mask)));
}
inline __m256i Load256(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// The 6-bit scales and mins of a Q4_K/Q5_K block as bytes sc[0..7], m[0..7].
inline void ScalesMinsK4(const uint8_t* q, uint64_t* sc, uint64_t* m) {
  uint32_t a, b, c;
  std::memcpy(&a, q, 4);
  std::memcpy(&b, q + 4, 4);
  std::memcpy(&c, q + 8, 4);
  const uint32_t sc_lo = a & 0x3F3F3F3Fu, m_lo = b & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
  const uint32_t m_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
  *sc = sc_lo | (uint64_t{sc_hi} << 32);
  *m = m_lo | (uint64_t{m_hi} << 32);
}

// Unpacked view of one weight super-block: code chunk j (32 unsigned codes), its madd
// scale vector, the vector the activation bsums are multiplied with, and the scales.
struct Q4KUnpack {
  static constexpr bool kHasMin = true;
  __m256i sc2;   // scales 0..7 as int16, in both lanes
  __m256i mins;  // min of group g (16 elements) = m[g / 2], int16
  __m256i q[4];  // raw qs chunks
  float d, dmin;
  // Q4_K and Q5_K share the scales/mins packing and the low 4 bits of the codes.
  template <typename Block>
  void InitLow4(const Block& b) {
    uint64_t sc, m;
    ScalesMinsK4(b.scales, &sc, &m);
    const __m128i s16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc)));
    sc2 = _mm256_set_m128i(s16, s16);
    const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(m)));
    mins = _mm256_set_m128i(_mm_unpackhi_epi16(m16, m16), _mm_unpacklo_epi16(m16, m16));
    for (int c = 0; c < 4; ++c) q[c] = Load256(b.qs + 32 * c);
    d = _cvtsh_ss(b.d);
    dmin = _cvtsh_ss(b.dmin);
  }
  void Init(const BlockQ4K& b) { InitLow4(b); }
  __m256i Codes(int j) const {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    return (j & 1) ? _mm256_and_si256(_mm256_srli_epi16(q[j >> 1], 4), m4)
                   : _mm256_and_si256(q[j >> 1], m4);
  }
  __m256i Scales(int j) const { return Shuffle(sc2, kBcast16[j]); }
};

struct Q5KUnpack : Q4KUnpack {
  __m256i qh;
  void Init(const BlockQ5K& b) {
    InitLow4(b);
    qh = Load256(b.qh);
  }
  __m256i Codes(int j) const {
    // Bit j of qh[l] becomes bit 4 of code l of chunk j.
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, j), _mm256_set1_epi8(1));
    return _mm256_or_si256(Q4KUnpack::Codes(j), _mm256_slli_epi16(hi, 4));
  }
};

// Scales of 16-element sub-blocks as Q6_K keeps them: lo2 / hi2 hold scales 0..7 / 8..15 as
// int16 in both lanes, and chunk j's madd vector pairs sub-blocks 2j, 2j + 1 (Q2_K, Q3_K,
// Q6_K).
struct Scales16 {
  __m256i lo2, hi2;
  void Set(__m256i s16) {
    lo2 = _mm256_permute2x128_si256(s16, s16, 0x00);
    hi2 = _mm256_permute2x128_si256(s16, s16, 0x11);
  }
  __m256i Scales(int j) const { return Shuffle(j < 4 ? lo2 : hi2, kPair16[j & 3]); }
};

struct Q6KUnpack : Scales16 {
  static constexpr bool kHasMin = false;
  __m256i mins;  // 32 * scale of group g, int16: the -32 code offset times bsums
  __m256i ql[4], qh[2];
  float d, dmin;
  void Init(const BlockQ6K& b) {
    const __m256i s16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    Set(s16);
    mins = _mm256_slli_epi16(s16, 5);
    for (int c = 0; c < 4; ++c) ql[c] = Load256(b.ql + 32 * c);
    qh[0] = Load256(b.qh);
    qh[1] = Load256(b.qh + 32);
    d = _cvtsh_ss(b.d);
    dmin = 0;
  }
  // Chunk j = 4h + m: codes + 32 in [0, 64).
  __m256i Codes(int j) const {
    const int h = j >> 2, m = j & 3;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i l = ql[2 * h + (m & 1)];
    const __m256i low =
        (m < 2) ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
    __m256i high;
    switch (m) {
      case 0:
        high = _mm256_slli_epi16(qh[h], 4);
        break;
      case 1:
        high = _mm256_slli_epi16(qh[h], 2);
        break;
      case 2:
        high = qh[h];
        break;
      default:
        high = _mm256_srli_epi16(qh[h], 2);
        break;
    }
    return _mm256_or_si256(low, _mm256_and_si256(high, m30));
  }
};

// Q2_K: chunk j = 4h + m holds the 2 bits at 2m of qs[32h + l]; a 4-bit scale and a 4-bit
// min per 16 elements.
struct Q2KUnpack : Scales16 {
  static constexpr bool kHasMin = true;
  __m256i mins;  // min of group g, int16
  __m256i qs[2];
  float d, dmin;
  void Init(const BlockQ2K& b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    Set(_mm256_cvtepu8_epi16(_mm_and_si128(raw, m4)));
    mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
    qs[0] = Load256(b.qs);
    qs[1] = Load256(b.qs + 32);
    d = _cvtsh_ss(b.d);
    dmin = _cvtsh_ss(b.dmin);
  }
  __m256i Codes(int j) const {
    return _mm256_and_si256(_mm256_srli_epi16(qs[j >> 2], 2 * (j & 3)), _mm256_set1_epi8(3));
  }
};

// Q3_K: codes + 4 in [0, 8): the 2 low bits as Q2_K, plus 4 where bit j of hmask[l] is set;
// the -4 offset is taken out as Q6_K's -32 is (mins: 4 * the scale of group g).
struct Q3KUnpack : Scales16 {
  static constexpr bool kHasMin = false;
  __m256i mins;
  __m256i qs[2], hm;
  float d, dmin;
  void Init(const BlockQ3K& b) {
    // The 16 6-bit scales, then the offset 32 off each byte.
    alignas(16) uint32_t words[4];
    Q3KScaleWords(b.scales, words);
    const __m128i sc = _mm_sub_epi8(_mm_load_si128(reinterpret_cast<const __m128i*>(words)),
                                    _mm_set1_epi8(32));
    const __m256i s16 = _mm256_cvtepi8_epi16(sc);
    Set(s16);
    mins = _mm256_slli_epi16(s16, 2);
    qs[0] = Load256(b.qs);
    qs[1] = Load256(b.qs + 32);
    hm = Load256(b.hmask);
    d = _cvtsh_ss(b.d);
    dmin = 0;
  }
  __m256i Codes(int j) const {
    const __m256i low =
        _mm256_and_si256(_mm256_srli_epi16(qs[j >> 2], 2 * (j & 3)), _mm256_set1_epi8(3));
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hm, j), _mm256_set1_epi8(1));
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
  }
};

template <typename Block>
struct UnpackFor;
template <>
struct UnpackFor<BlockQ4K> {
  using Type = Q4KUnpack;
};
template <>
struct UnpackFor<BlockQ5K> {
  using Type = Q5KUnpack;
};
template <>
struct UnpackFor<BlockQ6K> {
  using Type = Q6KUnpack;
};
template <>
struct UnpackFor<BlockQ2K> {
  using Type = Q2KUnpack;
};
template <>
struct UnpackFor<BlockQ3K> {
  using Type = Q3KUnpack;
};

}  // namespace cascade::cpu::avx2

#endif  // CASCADE_KERNELS_CPU_KQUANT_UNPACK_AVX2_H_
