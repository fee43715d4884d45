// AVX2 kernels for the 32-element block types with a minimum or a fifth bit (Q4_1, Q5_0,
// Q5_1) and for IQ4_XS (non-uniform 4-bit levels, a 6-bit scale per 32 elements) times
// activations quantized to Q8_0 blocks. (IQ4_NL, laid out as Q4_0, takes the Q8_0 kernels
// of kernels_avx2_quant.cc.)
//
// Order (per output element, any tile): for each 32-element block b in order, the exact
// integer sum S_b of the weight's unsigned codes u (0..15 or 0..31) times the activation
// codes, and sx_b = the sum of the activation codes, then in float
//   Q5_0 (value (u - 16) d):     acc = fma(S_b - 16 sx_b, d_w d_x, acc)
//   Q4_1, Q5_1 (value u d + m):  acc = fma(S_b, d_w d_x, acc); acc = fma(sx_b, m_w d_x, acc)
//   IQ4_XS (value level[u] scale): S_b over the signed levels (a byte shuffle of the
//   nibbles), acc = fma(S_b, scale_w d_x, acc)
// and y = acc. Every tile sums S_b exactly (a horizontal-add tree over 4 rows), so results
// are the same bits for any n, tile, row range or thread count. Decode and prefill share
// the 4-row tile; prefill blocks tokens so that a block's activations stay in L2 while the
// weight rows stream once per block.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/gemm_layout.h"
#include "kernels/cpu/prefetch.h"
#include "tensor/quant.h"
#include "tensor/quant_iq4.h"

namespace cascade::cpu::avx2 {
namespace {

constexpr int kTile = 4;  // tokens per tile
// Rows prefetched ahead of the tile into L2, as the Q4_0/Q8_0 decode tile does
// (kernels_avx2_quant.cc).
constexpr int64_t kPrefetchRows = 16;

// Per type: unsigned codes of a block, whether it has a minimum, and the code offset.
inline __m256i Codes(const BlockQ4_1& b) { return Nibbles32(b.qs); }
inline __m256i Codes(const BlockQ5_0& b) {
  return _mm256_or_si256(Nibbles32(b.qs), FifthBits(b.qh));
}
inline __m256i Codes(const BlockQ5_1& b) {
  return _mm256_or_si256(Nibbles32(b.qs), FifthBits(b.qh));
}
template <typename Block>
constexpr bool kHasMin = !std::is_same_v<Block, BlockQ5_0>;
inline uint16_t MinBits(const BlockQ4_1& b) { return b.m; }
inline uint16_t MinBits(const BlockQ5_1& b) { return b.m; }
inline uint16_t MinBits(const BlockQ5_0&) { return 0; }

template <typename Block>
constexpr bool kIq4 = std::is_same_v<Block, BlockIQ4XS>;
// Bytes of a row per 32 elements.
template <typename Block>
constexpr int64_t kBytesPer32 = kIq4<Block> ? sizeof(Block) * kQK / kQKK : sizeof(Block);

inline __m128 Fp16x4(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
  return _mm_cvtph_ps(_mm_setr_epi16(static_cast<int16_t>(a), static_cast<int16_t>(b),
                                     static_cast<int16_t>(c), static_cast<int16_t>(d), 0, 0, 0, 0));
}

// 4 weight rows x T activation rows; lane r of acc[j] is output (row r, token j). The
// block's codes are unpacked once for the T tokens. sx[j][b]: the sum of token j's codes
// in block b. pf != 0: prefetch each block step pf bytes ahead (the rows are contiguous).
template <typename Block, int T>
inline void Tile4xT(const Block* const* w, const BlockQ8_0* const* x, const int32_t* const* sx,
                    int64_t nb, float* y, int64_t ldy, int rows, int64_t pf) {
  __m128 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm_setzero_ps();
  __m128 xs_scales[8];  // IQ4_XS: the 4 rows' scales of the current super-block's sub-blocks
  for (int64_t b = 0; b < nb; ++b) {
    if (pf != 0) {
      constexpr int64_t kStep = 4 * kBytesPer32<Block>;
      PrefetchBytes<CacheLevel::kL2>(reinterpret_cast<const char*>(w[0]) + pf + b * kStep, kStep);
    }
    if constexpr (kIq4<Block>) {
      __m256i v[4], a[4];
      for (int r = 0; r < 4; ++r) {
        v[r] = Iq4Levels32(Iq4Indices(w[r], b));
        a[r] = _mm256_sign_epi8(v[r], v[r]);
      }
      if (b % 8 == 0) {  // a new super-block: d * (scale - 32) of its 8 sub-blocks, 4 rows
        const int64_t sb = b / 8;
        const __m128 d = Fp16x4(w[0][sb].d, w[1][sb].d, w[2][sb].d, w[3][sb].d);
        for (int k = 0; k < 8; ++k) {
          const __m128i ls = _mm_setr_epi32(Iq4XsScale(w[0][sb], k), Iq4XsScale(w[1][sb], k),
                                            Iq4XsScale(w[2][sb], k), Iq4XsScale(w[3][sb], k));
          xs_scales[k] = _mm_mul_ps(d, _mm_cvtepi32_ps(_mm_sub_epi32(ls, _mm_set1_epi32(32))));
        }
      }
      const __m128 ws = xs_scales[b % 8];
      for (int j = 0; j < T; ++j) {
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[j][b].qs));
        const __m128i s = Totals4(DotI8(v[0], a[0], xq), DotI8(v[1], a[1], xq),
                                  DotI8(v[2], a[2], xq), DotI8(v[3], a[3], xq));
        const __m128 dx = _mm_set1_ps(_cvtsh_ss(x[j][b].d));
        acc[j] = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm_mul_ps(ws, dx), acc[j]);
      }
    } else {
      __m256i u[4];
      for (int r = 0; r < 4; ++r) u[r] = Codes(w[r][b]);
      const __m128 wd = Fp16x4(w[0][b].d, w[1][b].d, w[2][b].d, w[3][b].d);
      const __m128 wm =
          Fp16x4(MinBits(w[0][b]), MinBits(w[1][b]), MinBits(w[2][b]), MinBits(w[3][b]));
      for (int j = 0; j < T; ++j) {
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[j][b].qs));
        __m128i s =
            Totals4(PartialU(u[0], xq), PartialU(u[1], xq), PartialU(u[2], xq), PartialU(u[3], xq));
        const __m128 dx = _mm_set1_ps(_cvtsh_ss(x[j][b].d));
        if constexpr (kHasMin<Block>) {
          acc[j] = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm_mul_ps(wd, dx), acc[j]);
          acc[j] =
              _mm_fmadd_ps(_mm_set1_ps(static_cast<float>(sx[j][b])), _mm_mul_ps(wm, dx), acc[j]);
        } else {
          s = _mm_sub_epi32(s, _mm_set1_epi32(16 * sx[j][b]));
          acc[j] = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm_mul_ps(wd, dx), acc[j]);
        }
      }
    }
  }
  StoreRows4(acc, T, rows, y, ldy);
}

// Token blocks that stay in L2 (one block for a decode step); per block the activation code
// sums (scratch: tb * nb ints), then the weights streamed 4 rows at a time (the last group
// repeats its last row; only `rows` outputs are written) against kTile tokens at a time.
template <typename Block>
void MatmulLegacy(const MatmulTask& t) {
  const int64_t nb = t.k / kQK;
  const int64_t tb = EqualTokenBlock(t.n, t.x_stride, kTile);
  auto* sums = reinterpret_cast<int32_t*>(t.scratch);
  auto xrow = [&](int64_t i) { return reinterpret_cast<const BlockQ8_0*>(t.x + i * t.x_stride); };
  for (int64_t i0 = 0; i0 < t.n; i0 += tb) {
    const int64_t i1 = std::min(t.n, i0 + tb);
    for (int64_t i = i0; i < i1 && !kIq4<Block>; ++i) {  // the IQ4 types need no sums
      for (int64_t b = 0; b < nb; ++b) {
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xrow(i)[b].qs));
        sums[(i - i0) * nb + b] = HsumI32(PartialU(_mm256_set1_epi8(1), xq));
      }
    }
    for (int64_t r = t.r0; r < t.r1; r += 4) {
      const Block* w[4];
      const int rows = RowGroup4(t, r, w);
      // Prefetch during the first token tile only: the rows are in L1 for the others.
      int64_t pf = rows == 4 ? kPrefetchRows * static_cast<int64_t>(t.w_stride) : 0;
      SweepTiles<kTile>(i0, i1, [&]<int T>(int64_t i) {
        const BlockQ8_0* x[T];
        const int32_t* s[T];
        for (int j = 0; j < T; ++j) {
          x[j] = xrow(i + j);
          s[j] = sums + (i + j - i0) * nb;
        }
        Tile4xT<Block, T>(w, x, s, nb, t.y + i * t.ldy + r, t.ldy, rows, pf);
        pf = 0;
      });
    }
  }
}

}  // namespace

MatmulFn LegacyQuantMatmul(TensorType type) {
  switch (type) {
    case TensorType::kQ4_1:
      return &MatmulLegacy<BlockQ4_1>;
    case TensorType::kQ5_0:
      return &MatmulLegacy<BlockQ5_0>;
    case TensorType::kQ5_1:
      return &MatmulLegacy<BlockQ5_1>;
    case TensorType::kIQ4_XS:
      return &MatmulLegacy<BlockIQ4XS>;
    default:
      return nullptr;
  }
}

}  // namespace cascade::cpu::avx2
