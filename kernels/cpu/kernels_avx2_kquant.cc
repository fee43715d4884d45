// AVX2 kernels for K-quant weights (Q2_K..Q6_K) times activations quantized to Q8_K
// super-blocks, and the AVX2 Q8_K activation quantizer (bit-identical to the scalar one).
//
// Order (per output element, any tile): for each super-block b in order, the exact integer
// sum S of the super-block's code x activation x sub-block-scale products and the exact
// min term M (Q2_K/Q4_K/Q5_K: activation bsums times the sub-block mins; Q6_K / Q3_K: its
// -32 / -4 code offset, 32 / 4 * bsums times the scales), then in float
//   Q2_K/Q4_K/Q5_K: acc = fma(S, d_w * d_x, acc);  acc = fma(-M, dmin_w * d_x, acc)
//   Q3_K/Q6_K:      acc = fma(S - M, d_w * d_x, acc)
// and y = acc. How S and M are summed differs by tile (decode: lanes of one row reduced
// per super-block; prefill: 8 rows interleaved in a panel, one lane each), but integer sums
// are exact, so every n, tile and thread count gives the same bits.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/gemm_layout.h"
#include "kernels/cpu/kquant_unpack_avx2.h"
#include "kernels/cpu/prefetch.h"
#include "tensor/quant.h"

namespace cascade::cpu::avx2 {
namespace {

// Below this many tokens, matmuls unpack each weight row in registers and run it against
// up to kDirectTile tokens at a time (KTile); from it on, rows or panels are unpacked into
// scratch once per token block. Measured on Zen 3, one thread, 5632 x 2048 (GFLOP/s,
// medians of 3-4 alternating runs), in registers / row-blocked: 4 tokens Q4_K 55.0 / 45.8,
// Q5_K 55.9 / 40.9, Q6_K 53.1 / 41.2; 8 tokens Q4_K 59.1 / 53.4, Q5_K 50.2 / 51.1, Q6_K
// 53.1 / 45.8; 12 tokens Q4_K 62.9 / 55.6, Q5_K 50.2 / 52.6, Q6_K 52.8 / 50.7; 16 tokens
// Q4_K 55.2 / 58.9, Q5_K 49.2 / 56.0 (Q6_K 59.5 / 54.8).
constexpr int64_t kBlockedMinTokens = 16;
constexpr int kDirectTile = 4;
// From this many tokens on, Q4_K/Q5_K use 8-row panels: expanding a panel costs about
// as much as a dozen tokens' products, so small micro-batches keep the row tile.
constexpr int64_t kPanelMinTokens = 32;

// The float step of one super-block, lane by lane (one output per lane): the order every
// K-quant tile follows. S is the exact integer sum of the super-block's scaled code
// products, M the exact min term (Q6_K: its -32 code offset, subtracted from S before
// the conversion):
//   Q4_K/Q5_K: acc = fma(S, d * dx, acc); acc = fma(-M, dmin * dx, acc)
//   Q6_K:      acc = fma(S - M, d * dx, acc)
// The same operations on 4 lanes (decode and row tiles; a single output uses lane 0) and
// on 8 (the panel tile).
template <bool kHasMin>
inline __m128 SuperBlockStep(__m128i s, __m128i m, __m128 d, __m128 dmin, __m128 dx, __m128 acc) {
  if constexpr (kHasMin) {
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm_mul_ps(d, dx), acc);
    return _mm_fnmadd_ps(_mm_cvtepi32_ps(m), _mm_mul_ps(dmin, dx), acc);
  } else {
    return _mm_fmadd_ps(_mm_cvtepi32_ps(_mm_sub_epi32(s, m)), _mm_mul_ps(d, dx), acc);
  }
}
template <bool kHasMin>
inline __m256 SuperBlockStep(__m256i s, __m256i m, __m256 d, __m256 dmin, __m256 dx, __m256 acc) {
  if constexpr (kHasMin) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, dx), acc);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmin, dx), acc);
  } else {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s, m)), _mm256_mul_ps(d, dx), acc);
  }
}

// Lane 0: the sum of a's 8 lanes; lane 1: the sum of b's (exact).
inline __m128i HsumI32x2(__m256i a, __m256i b) {
  const __m256i h = _mm256_hadd_epi32(a, b);  // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  return _mm_hadd_epi32(q, q);  // A B A B
}

// Decode tile: y[c * ldy] for one weight row w against activation rows x[0..T) over nb
// super-blocks, the weights unpacked in registers once per super-block and reused for the
// T tokens. With pf != 0, each super-block is prefetched pf bytes ahead (the next row).
template <typename Block, int T>
inline void KTile(const Block* w, const BlockQ8K* const* x, int64_t nb, float* y, int64_t ldy,
                  int64_t pf) {
  using U = typename UnpackFor<Block>::Type;
  __m128 acc[T];  // lane 0: the output
  for (int c = 0; c < T; ++c) acc[c] = _mm_setzero_ps();
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
      const __m128i sm = HsumI32x2(isum[c], _mm256_madd_epi16(Load256(x[c][b].bsums), u.mins));
      acc[c] = SuperBlockStep<U::kHasMin>(sm, _mm_shuffle_epi32(sm, _MM_SHUFFLE(1, 1, 1, 1)),
                                          _mm_set_ss(u.d), _mm_set_ss(u.dmin),
                                          _mm_set_ss(x[c][b].d), acc[c]);
    }
  }
  for (int c = 0; c < T; ++c) y[c * ldy] = _mm_cvtss_f32(acc[c]);
}

// A panel of 8 Q4_K/Q5_K weight rows for the blocked (prefill) path, interleaved like the
// Q4_0 panel (kernels_avx2_quant.cc): one register holds the same 4 consecutive codes of
// all 8 rows, one int32 lane per row. Per super-block b:
//   codes  [b][group g of 4, 0..63][row][4]   unsigned codes
//   scales [b][j][row]  int16 pair (s, s) of the scale of 32-element sub-block j
//   mins   [b][j][row]  int16 pair (m, m) of its min, multiplying activation bsums 2j, 2j + 1
//   d, dmin [b][row]
struct KPanel8 {
  uint8_t* codes;
  __m256i* scales;
  __m256i* mins;
  float* d;
  float* dmin;
  // Bytes one super-block of the panel takes.
  static constexpr size_t kBytesPerBlock = 64 * 32 + 8 * 32 + 8 * 32 + 2 * 8 * 4;
  KPanel8(void* scratch, int64_t nb) {
    auto* base = static_cast<uint8_t*>(scratch);
    codes = base;
    scales = reinterpret_cast<__m256i*>(base + nb * 2048);
    mins = scales + nb * 8;
    d = reinterpret_cast<float*>(mins + nb * 8);
    dmin = d + nb * 8;
  }
};

// int16 pairs (v[i], v[i]) of 8 int16 values, pair i in int32 lane i.
inline __m256i Pairs16(__m128i v) {
  return _mm256_set_m128i(_mm_unpackhi_epi16(v, v), _mm_unpacklo_epi16(v, v));
}

// The codes of one super-block of 8 unpacked rows, interleaved: group g (the 4 codes at 4g
// of every row, 32 bytes, row after row) at dst + g * group_bytes.
template <typename U>
inline void InterleaveCodes8(const U* u, uint8_t* dst, int64_t group_bytes) {
  for (int j = 0; j < 8; ++j) {
    __m256i v[8], o[8];
    for (int row = 0; row < 8; ++row) v[row] = u[row].Codes(j);
    Transpose8x8(v, o);
    for (int g = 0; g < 8; ++g) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (8 * j + g) * group_bytes), o[g]);
    }
  }
}

// Expands weight rows [r, r + rows) (rows <= 8; the last row repeats to fill 8) into p.
template <typename Block>
void ExpandKPanel8(const MatmulTask& t, int64_t r, int rows, int64_t nb, const KPanel8& p) {
  using U = typename UnpackFor<Block>::Type;
  static_assert(U::kHasMin, "Q4_K/Q5_K panels only");
  const Block* src[8];
  for (int j = 0; j < 8; ++j) {
    src[j] = reinterpret_cast<const Block*>(t.w + (r + std::min(j, rows - 1)) * t.w_stride);
  }
  for (int64_t b = 0; b < nb; ++b) {
    U u[8];
    __m256i scales[8], mins[8];
    for (int row = 0; row < 8; ++row) {
      u[row].Init(src[row][b]);
      uint64_t sc, m;
      ScalesMinsK4(src[row][b].scales, &sc, &m);
      scales[row] = Pairs16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc))));
      mins[row] = u[row].mins;  // the same pairs for the mins
      p.d[8 * b + row] = u[row].d;
      p.dmin[8 * b + row] = u[row].dmin;
    }
    InterleaveCodes8(u, p.codes + b * 2048, 32);
    Transpose8x8(scales, p.scales + 8 * b);
    Transpose8x8(mins, p.mins + 8 * b);
  }
}

// Groups of 4 codes whose int16 pair sums one int16 lane can hold before it must be
// widened (times the scale): |pair| <= 2 * max_code * 127, so Q4_K 8 (30480), Q5_K 4
// (31496), both below 2^15.
template <typename Block>
constexpr int kWidenGroups = std::is_same_v<Block, BlockQ4K> ? 8 : 4;

inline __m256i Bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Prefill tile: 8 panel rows x T tokens; lane r of acc[c] is output (row r, token c). Each
// group of 4 activation codes is broadcast and multiplied with the 8 rows' codes at once;
// the int16 pair sums widen times the sub-block scale every kWidenGroups groups, so each
// output's exact S lands in its own lane. M: the activation bsums against the panel's min
// pairs. Then the same float step as KTile, per lane.
template <typename Block, int T>
inline void KTile8xT(const KPanel8& w, int64_t nb, const BlockQ8K* const* x, float* y, int64_t ldy,
                     int rows) {
  constexpr int kWiden = kWidenGroups<Block>;
  __m256 acc[T];
  for (int c = 0; c < T; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const auto* wg = reinterpret_cast<const __m256i*>(w.codes + b * 2048);
    const __m256i* sc = w.scales + 8 * b;
    __m256i isum[T];
    for (int c = 0; c < T; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 64
    for (int g0 = 0; g0 < 64; g0 += kWiden) {
      __m256i s16[T];
      const __m256i wq0 = _mm256_load_si256(wg + g0);
      for (int c = 0; c < T; ++c) s16[c] = _mm256_maddubs_epi16(wq0, Bcast32(x[c][b].qs + 4 * g0));
#pragma GCC unroll 8
      for (int g = g0 + 1; g < g0 + kWiden; ++g) {
        const __m256i wq = _mm256_load_si256(wg + g);
        for (int c = 0; c < T; ++c) {
          s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(wq, Bcast32(x[c][b].qs + 4 * g)));
          __asm__("" : "+x"(s16[c]));  // one add chain per register (see Tile8xT)
        }
      }
      const __m256i s = sc[g0 / 8];  // the scale of their 32-element sub-block
      for (int c = 0; c < T; ++c) isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(s16[c], s));
    }
    const __m256 wd = _mm256_load_ps(w.d + 8 * b);
    const __m256 wdmin = _mm256_load_ps(w.dmin + 8 * b);
    for (int c = 0; c < T; ++c) {
      __m256i m = _mm256_setzero_si256();
      for (int i = 0; i < 8; ++i) {
        m = _mm256_add_epi32(m,
                             _mm256_madd_epi16(Bcast32(x[c][b].bsums + 2 * i), w.mins[8 * b + i]));
      }
      acc[c] = SuperBlockStep<true>(isum[c], m, wd, wdmin, _mm256_set1_ps(x[c][b].d), acc[c]);
    }
  }
  for (int c = 0; c < T; ++c) {
    alignas(32) float out[8];
    _mm256_store_ps(out, acc[c]);
    std::memcpy(y + c * ldy, out, rows * sizeof(float));
  }
}

// The row tile for micro-batches (kBlockedMinTokens to kPanelMinTokens - 1 tokens) and
// for all of Q6_K's blocked matmuls (its codes reach 63, so a panel's int16 pair sums
// would have to widen every 2 groups, which measured slower than this): one row unpacked
// once per token block. Same integers and float step as KTile, hence the same bits.
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

// Lane c of *s: the sum of a[c]'s 8 lanes; lane c of *m: the sum of b[c]'s (exact).
inline void HsumI32x4x2(const __m256i* a, const __m256i* b, __m128i* s, __m128i* m) {
  const __m256i ha =
      _mm256_hadd_epi32(_mm256_hadd_epi32(a[0], a[1]), _mm256_hadd_epi32(a[2], a[3]));
  const __m256i hb =
      _mm256_hadd_epi32(_mm256_hadd_epi32(b[0], b[1]), _mm256_hadd_epi32(b[2], b[3]));
  *s = _mm_add_epi32(_mm256_castsi256_si128(ha), _mm256_extracti128_si256(ha, 1));
  *m = _mm_add_epi32(_mm256_castsi256_si128(hb), _mm256_extracti128_si256(hb, 1));
}

// KTile on an unpacked row, for T = 4 tokens (their float steps run as the 4 lanes of one
// register) or 1 (lane 0).
template <bool kHasMin, int T>
inline void KTileUnpacked(const KUnpacked* w, const BlockQ8K* const* x, int64_t nb, float* y,
                          int64_t ldy) {
  static_assert(T == 1 || T == 4);
  __m128 acc = _mm_setzero_ps();  // lane c: token c's output
  for (int64_t b = 0; b < nb; ++b) {
    __m256i isum[T], msum[T];
    for (int c = 0; c < T; ++c) isum[c] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(w[b].q + 32 * j));
      const __m256i s = w[b].scales[j];
      for (int c = 0; c < T; ++c) {
        const __m256i p = _mm256_maddubs_epi16(q, Load256(x[c][b].qs + 32 * j));
        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, s));
      }
    }
    for (int c = 0; c < T; ++c) msum[c] = _mm256_madd_epi16(Load256(x[c][b].bsums), w[b].mins);
    __m128i s, m;
    __m128 dx;
    if constexpr (T == 1) {
      s = HsumI32x2(isum[0], msum[0]);
      m = _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 1, 1, 1));
      dx = _mm_set_ss(x[0][b].d);
    } else {
      HsumI32x4x2(isum, msum, &s, &m);
      dx = _mm_setr_ps(x[0][b].d, x[1][b].d, x[2][b].d, x[3][b].d);
    }
    acc = SuperBlockStep<kHasMin>(s, m, _mm_set1_ps(w[b].d), _mm_set1_ps(w[b].dmin), dx, acc);
  }
  alignas(16) float out[4];
  _mm_store_ps(out, acc);
  for (int c = 0; c < T; ++c) y[c * ldy] = out[c];
}

template <typename Block>
void RowBlocked(const MatmulTask& t) {
  constexpr int T = 4;
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

// Q4_K/Q5_K prefill: token blocks that stay in L2; 8-row panels expanded once per block
// (scratch), swept by 8 x kTile tiles.
template <typename Block>
void PanelBlocked(const MatmulTask& t) {
  constexpr int kTile = 3;  // tokens per tile (3 measured faster than 4, which spills)
  const int64_t nb = t.k / kQKK;
  auto xrow = [&](int64_t j) { return reinterpret_cast<const BlockQ8K*>(t.x + j * t.x_stride); };
  static_assert(KPanel8::kBytesPerBlock <= kScratchRowsPerElement * sizeof(float) * kQKK,
                "a panel fits in ScratchFloats(k)");
  const KPanel8 panel(t.scratch, nb);
  const int64_t tb = EqualTokenBlock(t.n, t.x_stride, kTile);
  for (int64_t i0 = 0; i0 < t.n; i0 += tb) {
    const int64_t i1 = std::min(t.n, i0 + tb);
    for (int64_t r = t.r0; r < t.r1; r += 8) {
      const int rows = static_cast<int>(std::min<int64_t>(8, t.r1 - r));
      ExpandKPanel8<Block>(t, r, rows, nb, panel);
      SweepTiles<kTile>(i0, i1, [&]<int N>(int64_t i) {
        const BlockQ8K* x[N];
        for (int c = 0; c < N; ++c) x[c] = xrow(i + c);
        KTile8xT<Block, N>(panel, nb, x, t.y + i * t.ldy + r, t.ldy, rows);
      });
    }
  }
}

// Q4_K/Q5_K prefill from kPanelMinTokens on takes the 8-row panels; Q6_K, Q3_K and Q2_K
// take the row tile (Q2_K/Q3_K: 16 scales per super-block, which the panels do not hold).
template <typename Block>
constexpr bool kHasPanels = std::is_same_v<Block, BlockQ4K> || std::is_same_v<Block, BlockQ5K>;

template <typename Block>
void MatmulQ8KAct(const MatmulTask& t) {
  if (t.n < kBlockedMinTokens) {  // decode: unpack in registers, stream the weights once
    const int64_t nb = t.k / kQKK;
    const int64_t pf = static_cast<int64_t>(t.w_stride);  // prefetch the next row
    for (int64_t r = t.r0; r < t.r1; ++r) {
      const auto* w = reinterpret_cast<const Block*>(t.w + r * t.w_stride);
      int64_t rpf = pf;
      SweepTiles<kDirectTile>(0, t.n, [&]<int T>(int64_t i) {
        const BlockQ8K* x[T];
        for (int c = 0; c < T; ++c) {
          x[c] = reinterpret_cast<const BlockQ8K*>(t.x + (i + c) * t.x_stride);
        }
        KTile<Block, T>(w, x, nb, t.y + i * t.ldy + r, t.ldy, rpf);
        rpf = 0;  // the row is in L1 for the next token tiles
      });
    }
  } else if (!kHasPanels<Block> || t.n < kPanelMinTokens) {
    RowBlocked<Block>(t);
  } else {
    if constexpr (kHasPanels<Block>) PanelBlocked<Block>(t);
  }
}

// Expands 8 rows of nb super-blocks for the 16-lane kernels (gemm_layout.h,
// ExpandKQuantRows8): codes through the same unpacking as every AVX2 tile, interleaved by
// the same transpose as the 8-row panels.
template <typename Block>
void ExpandKRows8(const uint8_t* const* rows, int64_t nb, const KRows8Out& out) {
  using U = typename UnpackFor<Block>::Type;
  for (int64_t b = 0; b < nb; ++b) {
    U u[8];
    for (int row = 0; row < 8; ++row) {
      const Block& blk = reinterpret_cast<const Block*>(rows[row])[b];
      u[row].Init(blk);
      const int64_t at = b * out.block_stride + row;
      out.d[at] = u[row].d;
      out.dmin[at] = u[row].dmin;
      if constexpr (U::kHasMin) {
        uint64_t sc, m;
        ScalesMinsK4(blk.scales, &sc, &m);
        for (int i = 0; i < 16; ++i) {
          out.scales[b * 16 * out.block_stride + i * out.block_stride + row] =
              static_cast<int32_t>((sc >> (8 * (i / 2))) & 0xFF);
        }
        for (int i = 0; i < 8; ++i) {
          const uint32_t mi = (m >> (8 * i)) & 0xFF;
          out.mins[b * 8 * out.block_stride + i * out.block_stride + row] =
              static_cast<int32_t>(mi | (mi << 16));
        }
      } else {
        for (int i = 0; i < 16; ++i) {
          out.scales[b * 16 * out.block_stride + i * out.block_stride + row] = blk.scales[i];
        }
        for (int i = 0; i < 8; ++i) {  // 32 * the scales of 16-element groups 2i, 2i + 1
          const auto lo = static_cast<uint16_t>(32 * blk.scales[2 * i]);
          const auto hi = static_cast<uint16_t>(32 * blk.scales[2 * i + 1]);
          out.mins[b * 8 * out.block_stride + i * out.block_stride + row] =
              static_cast<int32_t>(lo | (uint32_t{hi} << 16));
        }
      }
    }
    InterleaveCodes8(u, out.codes + b * out.block_bytes, out.group_bytes);
  }
}

}  // namespace

MatmulFn KQuantMatmul(TensorType type) {
  switch (type) {
    case TensorType::kQ2_K:
      return &MatmulQ8KAct<BlockQ2K>;
    case TensorType::kQ3_K:
      return &MatmulQ8KAct<BlockQ3K>;
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

// Same blocks as QuantizeQ8K (tensor/quant.cc): the scale comes from the first element of
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

namespace cascade::cpu {

void ExpandKQuantRows8(TensorType type, const uint8_t* const* rows, int64_t nb,
                       const KRows8Out& out) {
  switch (type) {
    case TensorType::kQ4_K:
      avx2::ExpandKRows8<BlockQ4K>(rows, nb, out);
      return;
    case TensorType::kQ5_K:
      avx2::ExpandKRows8<BlockQ5K>(rows, nb, out);
      return;
    default:
      avx2::ExpandKRows8<BlockQ6K>(rows, nb, out);
      return;
  }
}

}  // namespace cascade::cpu
