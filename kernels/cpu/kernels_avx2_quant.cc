// AVX2 kernels for Q8_0, Q4_0 and IQ4_NL weights times activations quantized to Q8_0 blocks, and
// the AVX2 Q8_0 activation quantizer (bit-identical to the scalar one).
//
// Order (per output element, any tile): for each 32-element block b in order, the exact
// integer dot product S_b of the block's codes is converted to float and accumulated as
// acc = fma(S_b, d_w(b) * d_x(b), acc) (one float lane per output). How S_b is summed
// differs by tile (decode: a horizontal-add tree over 4 rows; prefill: 8 rows interleaved
// in a panel, one lane each) but integer sums are exact, so results are bit-identical for
// any n, tile or thread count. Q4_0 codes are taken as unsigned nibbles u = code + 8 and
// 8 * sum(x) is subtracted: the same integers as the signed codes.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/gemm_layout.h"
#include "kernels/cpu/prefetch.h"
#include "tensor/quant.h"
#include "tensor/quant_iq4.h"

namespace cascade::cpu::avx2 {
namespace {

// From this many tokens on, matmuls block tokens (and expand weight panels once per block);
// below, they stream the weights in place against kDirectTile tokens at a time. Measured on
// Zen 3, one thread, 5632 x 2048 (GFLOP/s, medians of 4 alternating runs), direct / blocked:
// Q8_0 4 tokens 42.6 / 30.7, 8 tokens 43.3 / 42.2; Q4_0 4 tokens 49.9 / 35.4, 8 tokens
// 44.2 / 54.7.
constexpr int64_t kBlockedMinTokens = 8;
constexpr int kDirectTile = 4;
// Decode prefetches this many weight rows ahead of the tile, into L2: into L1, 8 rows
// ahead, 2048-wide Q8_0 rows (2 KiB each) evicted the tile's own and streamed at 16-20
// GiB/s; into L2, 16 ahead, 23-26 (kernel_bench BM_DecodeLayers Q8_0, this table, one Zen 4
// thread, 3 alternating rounds; 768-wide 17-26 -> 23-26). Q4_0 in the file's layout (rows
// not a multiple of 16, or weights used in place) takes the same tile and prefetch; this
// table groups Q4_0 weights otherwise.
constexpr int64_t kPrefetchRows = 16;

// 32 signed codes of a Q8_0 block.
inline __m256i Codes(const BlockQ8_0& b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
}
// An IQ4_NL block's 32 levels as signed codes: from here on it is a Q8_0 block (fp16 scale
// first, then its codes), so every Q8_0 kernel below computes it in the Q8_0 order.
inline __m256i Codes(const BlockIQ4NL& b) { return Iq4Levels32(b.qs); }
// Q5_0's signed codes u - 16 in [-16, 15] (the panels; kernels_avx2_legacy.cc's tiles take
// u itself).
inline __m256i Codes(const BlockQ5_0& b) {
  return _mm256_sub_epi8(_mm256_or_si256(Nibbles32(b.qs), FifthBits(b.qh)), _mm256_set1_epi8(16));
}

// The 32 nibbles of a Q4_0 block as unsigned codes u = code + 8 (Nibbles32, avx2_util.h).
// Q4_0 kernels multiply u directly and subtract 8 * sum(x): the same integers as the signed
// codes give, with no sign fix-ups.
inline __m256i Nibbles(const BlockQ4_0& b) { return Nibbles32(b.qs); }

// 8 * (sum of the 32 activation codes x): what unsigned nibbles add over signed codes.
inline int32_t X8(__m256i x) { return HsumI32(PartialU(_mm256_set1_epi8(8), x)); }

// Decode and micro-batch tile: 4 weight rows x T activation rows. The weights are read in
// place once for all T rows (Q4_0 nibbles unpacked once, Q8_0 magnitudes taken once).
// Output (r, j) is acc = fma(S_rb, d_rb * d_xj b, acc) over blocks b in order (S exact),
// as in every tile, so T does not change any result.
// pf != 0 prefetches each weight block pf bytes ahead (the next tile's rows): the kernel is
// busy enough at decode that the hardware prefetcher alone does not keep the bus full.
// For Q4_0, x8[j][b] = 8 * (sum of x_j's codes in block b), precomputed once per row.
template <typename Block, int T>
inline void Tile4xT(const Block* const* w, const BlockQ8_0* const* x, const int32_t* const* x8,
                    int64_t nb, float* y, int64_t ldy, int rows, int64_t pf) {
  constexpr bool kQ4 = std::is_same_v<Block, BlockQ4_0>;
  __m128 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (pf != 0) {
      // The tile's 4 rows are contiguous, so the matrix is read as one sequential sweep
      // (4 short interleaved row streams are too few for the hardware prefetcher): fetch
      // the bytes pf ahead of this block step in that sweep.
      constexpr int64_t kStep = 4 * sizeof(Block);
      PrefetchBytes<CacheLevel::kL2>(reinterpret_cast<const char*>(w[0]) + pf + b * kStep, kStep);
    }
    // Q4_0: unsigned nibbles (8 * sum(x) is subtracted from the totals below); Q8_0: the
    // codes and their magnitudes (for DotI8).
    __m256i wq[4], wa[4];
    for (int r = 0; r < 4; ++r) {
      if constexpr (kQ4) {
        wq[r] = Nibbles(w[r][b]);
      } else {
        wq[r] = Codes(w[r][b]);
        wa[r] = _mm256_sign_epi8(wq[r], wq[r]);
      }
    }
    const __m128 wd = _mm_cvtph_ps(_mm_setr_epi16(
        static_cast<int16_t>(w[0][b].d), static_cast<int16_t>(w[1][b].d),
        static_cast<int16_t>(w[2][b].d), static_cast<int16_t>(w[3][b].d), 0, 0, 0, 0));
    for (int j = 0; j < T; ++j) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[j][b].qs));
      __m256i p[4];
      for (int r = 0; r < 4; ++r) {
        if constexpr (kQ4) {
          p[r] = PartialU(wq[r], xq);
        } else {
          p[r] = DotI8(wq[r], wa[r], xq);
        }
      }
      __m128i s = Totals4(p[0], p[1], p[2], p[3]);
      if constexpr (kQ4) s = _mm_sub_epi32(s, _mm_set1_epi32(x8[j][b]));
      const __m128 d = _mm_mul_ps(wd, _mm_set1_ps(_cvtsh_ss(x[j][b].d)));
      acc[j] = _mm_fmadd_ps(_mm_cvtepi32_ps(s), d, acc[j]);
    }
  }
  StoreRows4(acc, T, rows, y, ldy);
}

// Few tokens: stream the weights once, 4 rows at a time (the last group may repeat its
// last row; only `rows` outputs are written), against up to kDirectTile tokens at once.
template <typename Block>
void Q8Direct(const MatmulTask& t) {
  const int64_t nb = t.k / kQK;
  // Q4_0: 8 * sum(x) per block and activation row, in scratch (n * nb ints).
  auto* x8 = reinterpret_cast<int32_t*>(t.scratch);
  if constexpr (std::is_same_v<Block, BlockQ4_0>) {
    for (int64_t i = 0; i < t.n; ++i) {
      const auto* x = reinterpret_cast<const BlockQ8_0*>(t.x + i * t.x_stride);
      for (int64_t b = 0; b < nb; ++b) {
        x8[i * nb + b] = X8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs)));
      }
    }
  }

  for (int64_t r = t.r0; r < t.r1; r += 4) {
    const Block* w[4];
    const int rows = RowGroup4(t, r, w);
    // Prefetch only during the first token tile: the rows are in L1 for the others.
    int64_t pf = rows == 4 ? kPrefetchRows * static_cast<int64_t>(t.w_stride) : 0;
    SweepTiles<kDirectTile>(0, t.n, [&]<int T>(int64_t i) {
      const BlockQ8_0* x[T];
      const int32_t* s[T];
      for (int j = 0; j < T; ++j) {
        x[j] = reinterpret_cast<const BlockQ8_0*>(t.x + (i + j) * t.x_stride);
        s[j] = x8 + (i + j) * nb;
      }
      Tile4xT<Block, T>(w, x, s, nb, t.y + i * t.ldy + r, t.ldy, rows, pf);
      pf = 0;
    });
  }
}

// A weight panel of 8 rows for the blocked path, interleaved so that one register holds
// the same 4 consecutive codes of all 8 rows: codes[block][group g of 4][row][4] (32 bytes
// per group, 256 per block) and the float row scales [block][row]. Q4_0 panels hold the
// unsigned nibbles u = code + 8 (see Nibbles), Q8_0 panels the signed codes.
struct Panel8 {
  int8_t* codes;
  float* scales;
};

// Block b (32 elements) of a row as the panels take it: its codes (Q4_0: unsigned
// nibbles; the others signed) and its scale as float. An IQ4_XS row's block b is
// sub-block b % 8 of super-block b / 8, scaled by d * (scale - 32) as the AVX2 tile does.
template <typename Block>
__m256i PanelCodes(const Block* row, int64_t b) {
  if constexpr (std::is_same_v<Block, BlockQ4_0>) {
    return Nibbles(row[b]);
  } else {
    return Codes(row[b]);
  }
}
inline __m256i PanelCodes(const BlockIQ4XS* row, int64_t b) {
  return Iq4Levels32(Iq4Indices(row, b));
}
template <typename Block>
float PanelScale(const Block* row, int64_t b) {
  return _cvtsh_ss(row[b].d);
}
inline float PanelScale(const BlockIQ4XS* row, int64_t b) {
  const BlockIQ4XS& sb = row[b / 8];
  return _cvtsh_ss(sb.d) * static_cast<float>(Iq4XsScale(sb, static_cast<int>(b % 8)) - 32);
}

// Expands 8 weight rows src[0..8) of nb blocks, interleaved: group g of block b (the 4
// codes at 4g of each of the 8 rows, 32 bytes) at codes + b * block_bytes + g * block_bytes
// / 8, and row j's scale of block b at scales[b * scale_stride + j].
template <typename Block>
void ExpandRows8(const Block* const* src, int64_t nb, int8_t* codes, int64_t block_bytes,
                 float* scales, int64_t scale_stride) {
  for (int64_t b = 0; b < nb; ++b) {
    __m256i v[8], o[8];
    for (int j = 0; j < 8; ++j) {
      v[j] = PanelCodes(src[j], b);
      scales[b * scale_stride + j] = PanelScale(src[j], b);
    }
    Transpose8x8(v, o);
    int8_t* dst = codes + b * block_bytes;
    for (int g = 0; g < 8; ++g) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + g * (block_bytes / 8)), o[g]);
    }
  }
}

// Expands weight rows [r, r + rows) (rows <= 8; the last row repeats to fill 8) into p.
template <typename Block>
void ExpandPanel8(const MatmulTask& t, int64_t r, int rows, int64_t nb, const Panel8& p) {
  const Block* src[8];
  for (int j = 0; j < 8; ++j) {
    src[j] = reinterpret_cast<const Block*>(t.w + (r + std::min(j, rows - 1)) * t.w_stride);
  }
  ExpandRows8(src, nb, p.codes, 256, p.scales, 8);
}

// Group g (4 codes) of activation block x broadcast and multiplied with a panel group wq
// (wa = |wq| for signed codes): per lane (row), int16 pair sums (unsigned) or int32 sums.
template <bool kUnsigned>
inline __m256i GroupProduct(__m256i wq, __m256i wa, const BlockQ8_0& x, int g) {
  int32_t four;
  std::memcpy(&four, x.qs + 4 * g, 4);
  const __m256i xv = _mm256_set1_epi32(four);
  if constexpr (kUnsigned) {
    return _mm256_maddubs_epi16(wq, xv);  // int16 pair sums
  } else {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(wa, _mm256_sign_epi8(xv, wq)),
                             _mm256_set1_epi16(1));  // int32 sums of 4
  }
}

// Prefill tile: 8 panel rows x T activation rows; lane r of acc[j] is output (row r, token
// j). Per block, group g's 4 codes of token j are broadcast to all lanes and multiplied
// with the 8 rows' group g at once, so the block's exact integer sum S of each output lands
// in its own lane with no horizontal reduction. Q4_0 (kUnsigned): the 8 pair sums of a
// lane stay within int16 (|u * x| pairs <= 2 * 15 * 128, eight of them < 2^15) and widen
// once per block, then 8 * sum(x) (x8s) is subtracted. Q8_0: |w| times x with w's sign,
// widened per group. Then acc = fma(S, d_w * d_x, acc), as in every tile.
// xs / x8s: [token][block] activation scales / 8 * sum(x), for the tile's T tokens
// (row stride nb).
template <bool kUnsigned, int T>
inline void Tile8xT(const Panel8& w, int64_t nb, const BlockQ8_0* const* x, const float* xs,
                    const int32_t* x8s, float* y, int64_t ldy, int rows) {
  __m256 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const auto* wg = reinterpret_cast<const __m256i*>(w.codes + b * 256);
    __m256i sum[T];
    __m256i wq = _mm256_load_si256(wg);
    __m256i wa = kUnsigned ? wq : _mm256_abs_epi8(wq);
    for (int j = 0; j < T; ++j) sum[j] = GroupProduct<kUnsigned>(wq, wa, x[j][b], 0);
#pragma GCC unroll 8
    for (int g = 1; g < 8; ++g) {
      wq = _mm256_load_si256(wg + g);
      wa = kUnsigned ? wq : _mm256_abs_epi8(wq);
      for (int j = 0; j < T; ++j) {
        const __m256i p = GroupProduct<kUnsigned>(wq, wa, x[j][b], g);
        sum[j] = kUnsigned ? _mm256_add_epi16(sum[j], p) : _mm256_add_epi32(sum[j], p);
        // Keep the sums in one chain per register: left free, GCC regroups them into a
        // tree whose temporaries spill.
        __asm__("" : "+x"(sum[j]));
      }
    }
    const __m256 wd = _mm256_load_ps(w.scales + 8 * b);
    for (int j = 0; j < T; ++j) {
      __m256i s32 = sum[j];
      if constexpr (kUnsigned) {
        s32 = _mm256_sub_epi32(_mm256_madd_epi16(sum[j], _mm256_set1_epi16(1)),
                               _mm256_set1_epi32(x8s[j * nb + b]));
      }
      const __m256 d = _mm256_mul_ps(wd, _mm256_set1_ps(xs[j * nb + b]));
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), d, acc[j]);
    }
  }
  for (int j = 0; j < T; ++j) {
    alignas(32) float out[8];
    _mm256_store_ps(out, acc[j]);
    std::memcpy(y + j * ldy, out, rows * sizeof(float));
  }
}

// Many tokens: token blocks that stay in L2; 8-row panels expanded into scratch once per
// block: [8 * nb * 32 codes][nb * 8 row scales][activation scales][8 * sum(x), Q4_0].
template <typename Block>
void Q8Blocked(const MatmulTask& t) {
  constexpr bool kUnsigned = std::is_same_v<Block, BlockQ4_0>;
  constexpr int kTile = 4;  // tokens per tile (4 measured best for both types)
  const int64_t nb = t.k / kQK;
  const int64_t tb = EqualTokenBlock(t.n, t.x_stride, kTile);
  Panel8 panel;
  panel.codes = reinterpret_cast<int8_t*>(t.scratch);
  panel.scales = t.scratch + nb * 64;                    // 8 * nb * 32 bytes = nb * 64 floats
  float* xs = panel.scales + nb * 8;                     // (tb, nb)
  auto* x8s = reinterpret_cast<int32_t*>(xs + tb * nb);  // (tb, nb), Q4_0
  auto xrow = [&](int64_t j) { return reinterpret_cast<const BlockQ8_0*>(t.x + j * t.x_stride); };
  for (int64_t i0 = 0; i0 < t.n; i0 += tb) {
    const int64_t i1 = std::min(t.n, i0 + tb);
    for (int64_t i = i0; i < i1; ++i) {
      const BlockQ8_0* a = xrow(i);
      for (int64_t b = 0; b < nb; ++b) {
        xs[(i - i0) * nb + b] = _cvtsh_ss(a[b].d);
        if constexpr (kUnsigned) {
          x8s[(i - i0) * nb + b] =
              X8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs)));
        }
      }
    }
    for (int64_t r = t.r0; r < t.r1; r += 8) {
      const int rows = static_cast<int>(std::min<int64_t>(8, t.r1 - r));
      ExpandPanel8<Block>(t, r, rows, nb, panel);
      SweepTiles<kTile>(i0, i1, [&]<int T>(int64_t i) {
        const BlockQ8_0* x[T];
        for (int j = 0; j < T; ++j) x[j] = xrow(i + j);
        const int64_t o = (i - i0) * nb;
        Tile8xT<kUnsigned, T>(panel, nb, x, xs + o, x8s + o, t.y + i * t.ldy + r, t.ldy, rows);
      });
    }
  }
}

template <typename Block>
void MatmulQ8_0Act(const MatmulTask& t) {
  if (t.n < kBlockedMinTokens) {
    Q8Direct<Block>(t);
  } else {
    Q8Blocked<Block>(t);
  }
}

}  // namespace

MatmulFn QuantMatmul(TensorType type) {
  if (type == TensorType::kQ8_0) return &MatmulQ8_0Act<BlockQ8_0>;
  if (type == TensorType::kQ4_0) return &MatmulQ8_0Act<BlockQ4_0>;
  if (type == TensorType::kIQ4_NL) return &MatmulQ8_0Act<BlockIQ4NL>;
  return nullptr;
}

// Same blocks as the scalar quantizer: d = amax / 127 rounded to fp16, codes
// round-half-to-even of x * (1 / d) in float.
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
    y[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int j = 0; j < 4; ++j) {
      q[j] = _mm256_cvtps_epi32(
          _mm256_round_ps(_mm256_mul_ps(v[j], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    // int32 -> int8 with lane order restored after the in-lane packs.
    const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), p);
  }
}

}  // namespace cascade::cpu::avx2

namespace cascade::cpu {

namespace {

template <typename Block>
void ExpandRowsOf(const uint8_t* const* rows, int64_t nb, int8_t* codes, int64_t block_bytes,
                  float* scales, int64_t scale_stride) {
  const Block* src[8];
  for (int j = 0; j < 8; ++j) src[j] = reinterpret_cast<const Block*>(rows[j]);
  avx2::ExpandRows8(src, nb, codes, block_bytes, scales, scale_stride);
}

}  // namespace

void ExpandQuantRows8(TensorType type, const uint8_t* const* rows, int64_t nb, int8_t* codes,
                      int64_t block_bytes, float* scales, int64_t scale_stride) {
  switch (type) {
    case TensorType::kQ4_0:
      return ExpandRowsOf<BlockQ4_0>(rows, nb, codes, block_bytes, scales, scale_stride);
    case TensorType::kIQ4_NL:
      return ExpandRowsOf<BlockIQ4NL>(rows, nb, codes, block_bytes, scales, scale_stride);
    case TensorType::kQ5_0:
      return ExpandRowsOf<BlockQ5_0>(rows, nb, codes, block_bytes, scales, scale_stride);
    case TensorType::kIQ4_XS:
      return ExpandRowsOf<BlockIQ4XS>(rows, nb, codes, block_bytes, scales, scale_stride);
    default:
      return ExpandRowsOf<BlockQ8_0>(rows, nb, codes, block_bytes, scales, scale_stride);
  }
}

}  // namespace cascade::cpu
