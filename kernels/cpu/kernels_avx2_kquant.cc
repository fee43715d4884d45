// AVX2 kernels for K-quant weights (Q4_K, Q5_K, Q6_K) times activations quantized to Q8_K
// super-blocks, and the AVX2 Q8_K activation quantizer (bit-identical to the scalar one).
//
// Order (per output element, any tile): for each super-block b in order, the exact integer
// sums S[l] (8 lanes; lane l collects the scaled products of elements 4l..4l+3 of every
// 32-element chunk, as _mm256_madd_epi16 pairs them) and, for Q4_K/Q5_K, the exact min
// sums M[l] (lane l: bsums 2l and 2l+1 times their mins), then
//   acc[l] = fma(S[l], d_w * d_x, acc[l]);  acc[l] = fnmadd(M[l], dmin_w * d_x, acc[l])
// (Q6_K folds its -32 code offset into S instead), and finally Hsum8(acc). The integers do
// not depend on the tile, so every tile gives the same bits. Weight codes are unpacked in
// registers once per (row, super-block) and reused for the T tokens of a tile.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/avx2_util.h"
#include "model/quant.h"

namespace cascade::cpu::avx2 {
namespace {

// From this many tokens on, matmuls block tokens so that their activations stay in L2.
constexpr int64_t kBlockedMinTokens = 4;

// pshufb masks that broadcast int16 element j (of each 128-bit lane) to the whole lane.
alignas(32) const uint8_t kBcast16[8][32] = {
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
alignas(32) const uint8_t kPair16[4][32] = {
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

struct Q6KUnpack {
  static constexpr bool kHasMin = false;
  __m256i lo2, hi2;  // scales 0..7 / 8..15 as int16, each in both lanes
  __m256i mins;      // 32 * scale of group g, int16: the -32 code offset times bsums
  __m256i ql[4], qh[2];
  float d, dmin;
  void Init(const BlockQ6K& b) {
    const __m256i s16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    lo2 = _mm256_permute2x128_si256(s16, s16, 0x00);
    hi2 = _mm256_permute2x128_si256(s16, s16, 0x11);
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
  __m256i Scales(int j) const { return Shuffle(j < 4 ? lo2 : hi2, kPair16[j & 3]); }
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

// The float step of one super-block for one output, shared by every tile so that all
// give the same bits: acc += S * (d_w * d_x), then - M * (dmin_w * d_x) where M pairs the
// activation bsums with the weight mins (Q6_K: M is the -32 offset, folded into S).
template <bool kHasMin>
inline __m256 SuperBlockStep(__m256i isum, const BlockQ8K& x, __m256i mins, float d, float dmin,
                             __m256 acc) {
  const __m256i msum = _mm256_madd_epi16(Load256(x.bsums), mins);
  if constexpr (kHasMin) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(d * x.d), acc);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(dmin * x.d), acc);
  } else {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum, msum)),
                           _mm256_set1_ps(d * x.d), acc);
  }
}

// y[c * ldy] for one weight row w against activation rows x[0..T) over nb super-blocks.
// With pf != 0, each super-block is prefetched pf bytes ahead (the next row) first.
template <typename Block, int T>
inline void KTile(const Block* w, const BlockQ8K* const* x, int64_t nb, float* y, int64_t ldy,
                  int64_t pf) {
  using U = typename UnpackFor<Block>::Type;
  __m256 acc[T];
  for (int c = 0; c < T; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (pf != 0) PrefetchBytes(reinterpret_cast<const char*>(w + b) + pf, sizeof(Block));
    U u;
    u.Init(w[b]);
    __m256i isum[T];
    for (int c = 0; c < T; ++c) isum[c] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i q = u.Codes(j);
      const __m256i s = u.Scales(j);
      for (int c = 0; c < T; ++c) {
        const __m256i p = _mm256_maddubs_epi16(q, Load256(x[c][b].qs + 32 * j));
        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, s));
      }
    }
    for (int c = 0; c < T; ++c) {
      acc[c] = SuperBlockStep<U::kHasMin>(isum[c], x[c][b], u.mins, u.d, u.dmin, acc[c]);
    }
  }
  for (int c = 0; c < T; ++c) y[c * ldy] = Hsum8(acc[c]);
}

template <typename Block, int T>
void KTokenRange(const Block* w, const MatmulTask& t, int64_t r, int64_t i0, int64_t i1) {
  const int64_t nb = t.k / kQKK;
  auto xrow = [&](int64_t j) { return reinterpret_cast<const BlockQ8K*>(t.x + j * t.x_stride); };
  int64_t i = i0;
  for (; i + T <= i1; i += T) {
    const BlockQ8K* x[T];
    for (int c = 0; c < T; ++c) x[c] = xrow(i + c);
    KTile<Block, T>(w, x, nb, t.y + i * t.ldy + r, t.ldy, 0);
  }
  // Decode: prefetch the next row while this one is computed.
  const int64_t pf = i1 - i0 < kBlockedMinTokens ? static_cast<int64_t>(t.w_stride) : 0;
  for (; i < i1; ++i) {
    const BlockQ8K* x[1] = {xrow(i)};
    KTile<Block, 1>(w, x, nb, t.y + i * t.ldy + r, t.ldy, pf);
  }
}

// A super-block unpacked once for the blocked (prefill) path: codes, the madd scale vector
// of each 32-element chunk, the bsums multiplier, and the scales.
struct alignas(32) KUnpacked {
  uint8_t q[256];
  __m256i scales[8];
  __m256i mins;
  float d, dmin;
};

template <typename Block>
void UnpackRow(const Block* w, int64_t nb, KUnpacked* out) {
  using U = typename UnpackFor<Block>::Type;
  for (int64_t b = 0; b < nb; ++b) {
    U u;
    u.Init(w[b]);
    for (int j = 0; j < 8; ++j) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(out[b].q + 32 * j), u.Codes(j));
      out[b].scales[j] = u.Scales(j);
    }
    out[b].mins = u.mins;
    out[b].d = u.d;
    out[b].dmin = u.dmin;
  }
}

// KTile on an unpacked row: the same integers and float operations, hence the same bits.
template <bool kHasMin, int T>
inline void KTileUnpacked(const KUnpacked* w, const BlockQ8K* const* x, int64_t nb, float* y,
                          int64_t ldy) {
  __m256 acc[T];
  for (int c = 0; c < T; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i isum[T];
    for (int c = 0; c < T; ++c) isum[c] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(w[b].q + 32 * j));
      const __m256i s = w[b].scales[j];
      for (int c = 0; c < T; ++c) {
        const __m256i p = _mm256_maddubs_epi16(q, Load256(x[c][b].qs + 32 * j));
        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, s));
      }
    }
    for (int c = 0; c < T; ++c) {
      acc[c] = SuperBlockStep<kHasMin>(isum[c], x[c][b], w[b].mins, w[b].d, w[b].dmin, acc[c]);
    }
  }
  for (int c = 0; c < T; ++c) y[c * ldy] = Hsum8(acc[c]);
}

template <typename Block>
void MatmulQ8KAct(const MatmulTask& t) {
  constexpr int T = 4;
  if (t.n < kBlockedMinTokens) {  // decode: unpack in registers, stream the weights once
    for (int64_t r = t.r0; r < t.r1; ++r) {
      KTokenRange<Block, T>(reinterpret_cast<const Block*>(t.w + r * t.w_stride), t, r, 0, t.n);
    }
    return;
  }
  // Prefill: token blocks that stay in L2; each row unpacked once per block (scratch, L1).
  constexpr bool kHasMin = UnpackFor<Block>::Type::kHasMin;
  const int64_t nb = t.k / kQKK;
  const int64_t tb = EqualTokenBlock(t.n, t.x_stride, T);
  auto* row = reinterpret_cast<KUnpacked*>(t.scratch);
  auto xrow = [&](int64_t j) { return reinterpret_cast<const BlockQ8K*>(t.x + j * t.x_stride); };
  for (int64_t i0 = 0; i0 < t.n; i0 += tb) {
    const int64_t i1 = std::min(t.n, i0 + tb);
    for (int64_t r = t.r0; r < t.r1; ++r) {
      UnpackRow(reinterpret_cast<const Block*>(t.w + r * t.w_stride), nb, row);
      int64_t i = i0;
      for (; i + T <= i1; i += T) {
        const BlockQ8K* x[T] = {xrow(i), xrow(i + 1), xrow(i + 2), xrow(i + 3)};
        KTileUnpacked<kHasMin, T>(row, x, nb, t.y + i * t.ldy + r, t.ldy);
      }
      for (; i < i1; ++i) {
        const BlockQ8K* x[1] = {xrow(i)};
        KTileUnpacked<kHasMin, 1>(row, x, nb, t.y + i * t.ldy + r, t.ldy);
      }
    }
  }
}

}  // namespace

MatmulFn KQuantMatmul(TensorType type) {
  switch (type) {
    case TensorType::kQ4_K:
      return &MatmulQ8KAct<BlockQ4K>;
    case TensorType::kQ5_K:
      return &MatmulQ8KAct<BlockQ5K>;
    case TensorType::kQ6_K:
      return &MatmulQ8KAct<BlockQ6K>;
    default:
      return nullptr;
  }
}

// Same blocks as QuantizeQ8K (model/quant.cc): the scale comes from the first element of
// largest magnitude, codes are round-half-to-even of x * (-127 / max) in float.
void QuantizeQ8KRow(const float* x, int64_t k, void* out) {
  auto* y = static_cast<BlockQ8K*>(out);
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < k / kQKK; ++b, x += kQKK) {
    __m256 am = _mm256_setzero_ps();
    for (int i = 0; i < 32; ++i)
      am = _mm256_max_ps(am, _mm256_andnot_ps(sign_mask, _mm256_loadu_ps(x + 8 * i)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(am), _mm256_extractf128_ps(am, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float amax = _mm_cvtss_f32(m4);
    if (amax == 0) {
      std::memset(&y[b], 0, sizeof(BlockQ8K));
      continue;
    }
    const __m256 amv = _mm256_set1_ps(amax);
    float max = 0;
    for (int i = 0; i < 32; ++i) {
      const __m256 v = _mm256_andnot_ps(sign_mask, _mm256_loadu_ps(x + 8 * i));
      const int mask = _mm256_movemask_ps(_mm256_cmp_ps(v, amv, _CMP_EQ_OQ));
      if (mask != 0) {
        max = x[8 * i + __builtin_ctz(static_cast<unsigned>(mask))];
        break;
      }
    }
    const float iscale = -127.f / max;
    const __m256 isv = _mm256_set1_ps(iscale);
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int c = 0; c < 8; ++c) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 32 * c + 8 * j), isv);
        q[j] =
            _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
      // |codes| <= 127 here (|x| <= |max|), so the saturating packs are exact.
      __m256i p =
          _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + 32 * c), p);
      // Sums of each 16 codes: pairs (maddubs with the sign moved to the 1s), then quads.
      const __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, p), ones16);
      __m256i s = _mm256_hadd_epi32(s4, s4);
      s = _mm256_hadd_epi32(s, s);
      y[b].bsums[2 * c] = static_cast<int16_t>(_mm256_cvtsi256_si32(s));
      y[b].bsums[2 * c + 1] =
          static_cast<int16_t>(_mm_cvtsi128_si32(_mm256_extracti128_si256(s, 1)));
    }
    y[b].d = 1 / iscale;
  }
}

}  // namespace cascade::cpu::avx2
