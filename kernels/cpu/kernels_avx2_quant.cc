// AVX2 kernels for Q8_0 and Q4_0 weights times activations quantized to Q8_0 blocks, and
// the AVX2 Q8_0 activation quantizer (bit-identical to the scalar one).
//
// Order (per output element, any tile): for each 32-element block b in order, the exact
// integer dot product S_b of the block's codes is converted to float and accumulated as
// acc = fma(S_b, d_w(b) * d_x(b), acc) (one float lane per output; the integer sums of 8
// outputs are reduced together by a horizontal-add tree, which is exact). Q4_0 rows are
// expanded to signed codes in registers (decode) or once per panel (prefill): the same
// integers, hence bit-identical results for any n, tile or thread count.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/avx2_util.h"
#include "model/quant.h"

namespace cascade::cpu::avx2 {
namespace {

// From this many tokens on, matmuls block tokens (and expand weight panels once per block).
constexpr int64_t kBlockedMinTokens = 4;
// Decode prefetches this many weight rows ahead of the tile.
constexpr int64_t kPrefetchRows = 8;

// 32 signed codes of a Q8_0 block.
inline __m256i Codes(const BlockQ8_0& b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
}

// The 32 nibbles of a Q4_0 block as unsigned codes u = code + 8 (low nibbles, then high).
// Q4_0 kernels multiply u directly and subtract 8 * sum(x): the same integers as the signed
// codes give, with no sign fix-ups. The 16 packed bytes go to both halves (a plain load),
// the upper half shifted right by 4 bits per 32-bit lane; masking each byte to 4 bits then
// leaves the low nibbles below and the high nibbles above.
inline __m256i Nibbles(const BlockQ4_0& b) {
  const __m256i both =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs)));
  return _mm256_and_si256(_mm256_srlv_epi32(both, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                          _mm256_set1_epi8(0x0F));
}

// 8 int32 partial sums (groups of 4 products) of weight codes w and activation codes x.
inline __m256i Partial(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)),
                           _mm256_set1_epi16(1));
}

// The same for unsigned weight codes u in [0, 15] (Q4_0 nibbles): |u * x| pairs stay far
// below 2^15.
inline __m256i PartialU(__m256i u, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
}

// 8 * (sum of the 32 activation codes x): what unsigned nibbles add over signed codes.
inline int32_t X8(__m256i x) { return HsumI32(PartialU(_mm256_set1_epi8(8), x)); }

// Totals of four 8-lane partial sums: lane j of the result is the sum of p[j]'s lanes.
inline __m128i Totals4(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// Decode tile: 4 weight rows x 1 activation row, weights read in place. Output r is
// acc_r = fma(S_rb, d_rb * d_x b, acc_r) over blocks b in order (S exact), as in every tile.
// pf != 0 prefetches each weight block pf bytes ahead (the next tile's rows): the kernel is
// busy enough at decode that the hardware prefetcher alone does not keep the bus full.
// For Q4_0, x8[b] = 8 * (sum of x's codes in block b), precomputed once per activation row.
template <typename Block>
inline void Tile4x1(const Block* const* w, const BlockQ8_0* x, const int32_t* x8, int64_t nb,
                    float* y, int rows, int64_t pf) {
  __m128 acc = _mm_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (pf != 0) {
      // The tile's 4 rows are contiguous, so the matrix is read as one sequential sweep
      // (4 short interleaved row streams are too few for the hardware prefetcher): fetch
      // the bytes pf ahead of this block step in that sweep, one line per 64 bytes.
      constexpr int64_t kStep = 4 * sizeof(Block);
      const char* p = reinterpret_cast<const char*>(w[0]) + pf + b * kStep;
      for (int64_t off = 0; off < kStep; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
    }
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    __m128i s;
    if constexpr (std::is_same_v<Block, BlockQ4_0>) {
      // 8 * sum(x) (see Nibbles) is subtracted once from all four totals.
      __m256i p[4];
      for (int r = 0; r < 4; ++r) p[r] = PartialU(Nibbles(w[r][b]), xq);
      s = _mm_sub_epi32(Totals4(p[0], p[1], p[2], p[3]), _mm_set1_epi32(x8[b]));
    } else {
      s = Totals4(Partial(Codes(w[0][b]), xq), Partial(Codes(w[1][b]), xq),
                  Partial(Codes(w[2][b]), xq), Partial(Codes(w[3][b]), xq));
    }
    const __m128 wd = _mm_cvtph_ps(_mm_setr_epi16(
        static_cast<int16_t>(w[0][b].d), static_cast<int16_t>(w[1][b].d),
        static_cast<int16_t>(w[2][b].d), static_cast<int16_t>(w[3][b].d), 0, 0, 0, 0));
    const __m128 d = _mm_mul_ps(wd, _mm_set1_ps(_cvtsh_ss(x[b].d)));
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(s), d, acc);
  }
  alignas(16) float out[4];
  _mm_store_ps(out, acc);
  for (int r = 0; r < rows; ++r) y[r] = out[r];
}

// Few tokens: stream the weights once, 4 rows at a time (the last group may repeat its
// last row; only `rows` outputs are written).
template <typename Block>
void Q8Direct(const MatmulTask& t) {
  const int64_t nb = t.k / kQK;
  // Q4_0: 8 * sum(x) per block and activation row, in scratch (n * nb ints; n < 4).
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
    const int rows = static_cast<int>(std::min<int64_t>(4, t.r1 - r));
    const Block* w[4];
    for (int j = 0; j < 4; ++j) {
      w[j] = reinterpret_cast<const Block*>(t.w + (r + std::min(j, rows - 1)) * t.w_stride);
    }
    const int64_t pf = rows == 4 ? kPrefetchRows * static_cast<int64_t>(t.w_stride) : 0;
    for (int64_t i = 0; i < t.n; ++i) {
      const auto* x = reinterpret_cast<const BlockQ8_0*>(t.x + i * t.x_stride);
      Tile4x1<Block>(w, x, x8 + i * nb, nb, t.y + i * t.ldy + r, rows, pf);
    }
  }
}

// A weight panel of 4 rows for the blocked path: codes [row][block][32] and the float
// scales [block][row][2] (each twice, matching the 4 x 2 tile's output order).
struct Panel {
  int8_t* codes;
  float* scales;
};

// Prefill tile: 4 panel rows x 2 activation rows (pairs) -> 8 outputs in one register,
// ordered (r0 c0, r0 c1, r1 c0, ..., r3 c1). xs holds [block][2] activation scales.
// kUnsigned (Q4_0): the panel holds the unsigned nibbles u = code + 8, multiplied directly
// (no sign fix-ups), and x8s holds [block][2] values 8 * sum(x) to subtract: the same
// integers S as signed codes give.
template <bool kUnsigned>
inline void Tile4x2(const Panel& w, int64_t nb, const BlockQ8_0* x0, const BlockQ8_0* x1,
                    const float* xs, const int32_t* x8s, float* y, int64_t ldy, int rows) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i xq0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0[b].qs));
    const __m256i xq1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1[b].qs));
    __m256i h[4];
    for (int r = 0; r < 4; ++r) {
      const __m256i wq =
          _mm256_load_si256(reinterpret_cast<const __m256i*>(w.codes + (r * nb + b) * 32));
      if constexpr (kUnsigned) {
        h[r] = _mm256_hadd_epi32(PartialU(wq, xq0), PartialU(wq, xq1));
      } else {
        h[r] = _mm256_hadd_epi32(Partial(wq, xq0), Partial(wq, xq1));
      }
    }
    const __m256i h01 = _mm256_hadd_epi32(h[0], h[1]), h23 = _mm256_hadd_epi32(h[2], h[3]);
    __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(h01, h23, 0x20),
                                 _mm256_permute2x128_si256(h01, h23, 0x31));
    if constexpr (kUnsigned) {
      s = _mm256_sub_epi32(
          s,
          _mm256_castpd_si256(_mm256_broadcast_sd(reinterpret_cast<const double*>(x8s + 2 * b))));
    }
    const __m256 d = _mm256_mul_ps(
        _mm256_load_ps(w.scales + 8 * b),
        _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(xs + 2 * b))));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc);
  }
  alignas(32) float out[8];
  _mm256_store_ps(out, acc);
  for (int r = 0; r < rows; ++r) {
    y[r] = out[2 * r];
    y[ldy + r] = out[2 * r + 1];
  }
}

// Prefill tile for a leftover single activation row: the same per-output arithmetic.
template <bool kUnsigned>
inline void Tile4x1Panel(const Panel& w, int64_t nb, const BlockQ8_0* x, float* y, int rows) {
  __m128 acc = _mm_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    auto codes = [&](int r) {
      return _mm256_load_si256(reinterpret_cast<const __m256i*>(w.codes + (r * nb + b) * 32));
    };
    __m128i s;
    if constexpr (kUnsigned) {
      s = _mm_sub_epi32(Totals4(PartialU(codes(0), xq), PartialU(codes(1), xq),
                                PartialU(codes(2), xq), PartialU(codes(3), xq)),
                        _mm_set1_epi32(X8(xq)));
    } else {
      s = Totals4(Partial(codes(0), xq), Partial(codes(1), xq), Partial(codes(2), xq),
                  Partial(codes(3), xq));
    }
    // scales [b][r][2] -> (s0, s1, s2, s3)
    const __m256 ws = _mm256_load_ps(w.scales + 8 * b);
    const __m128 wd = _mm_shuffle_ps(_mm256_castps256_ps128(ws), _mm256_extractf128_ps(ws, 1),
                                     _MM_SHUFFLE(2, 0, 2, 0));
    const __m128 d = _mm_mul_ps(wd, _mm_set1_ps(_cvtsh_ss(x[b].d)));
    acc = _mm_fmadd_ps(_mm_cvtepi32_ps(s), d, acc);
  }
  alignas(16) float out[4];
  _mm_store_ps(out, acc);
  for (int r = 0; r < rows; ++r) y[r] = out[r];
}

// Many tokens: token blocks that stay in L2; 4-row panels expanded into scratch once per
// block: [4 * nb * 32 codes][nb * 8 scales][activation scale pairs].
template <typename Block>
void Q8Blocked(const MatmulTask& t) {
  const int64_t nb = t.k / kQK;
  const int64_t tb = TokenBlock(t.x_stride, 2);
  Panel panel;
  panel.codes = reinterpret_cast<int8_t*>(t.scratch);
  panel.scales = t.scratch + nb * 32;  // 4 * nb * 32 bytes = nb * 32 floats
  float* xs = panel.scales + nb * 8;   // (tb / 2, nb, 2)
  constexpr bool kUnsigned = std::is_same_v<Block, BlockQ4_0>;
  auto* x8s = reinterpret_cast<int32_t*>(xs + tb / 2 * nb * 2);  // (tb / 2, nb, 2), Q4_0
  auto xrow = [&](int64_t j) { return reinterpret_cast<const BlockQ8_0*>(t.x + j * t.x_stride); };
  for (int64_t i0 = 0; i0 < t.n; i0 += tb) {
    const int64_t i1 = std::min(t.n, i0 + tb);
    const int64_t pairs = (i1 - i0) / 2;
    for (int64_t p = 0; p < pairs; ++p) {
      const BlockQ8_0* a = xrow(i0 + 2 * p);
      const BlockQ8_0* c = xrow(i0 + 2 * p + 1);
      for (int64_t b = 0; b < nb; ++b) {
        xs[(p * nb + b) * 2] = _cvtsh_ss(a[b].d);
        xs[(p * nb + b) * 2 + 1] = _cvtsh_ss(c[b].d);
        if constexpr (kUnsigned) {
          auto load = [](const BlockQ8_0& blk) {
            return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
          };
          x8s[(p * nb + b) * 2] = X8(load(a[b]));
          x8s[(p * nb + b) * 2 + 1] = X8(load(c[b]));
        }
      }
    }
    for (int64_t r = t.r0; r < t.r1; r += 4) {
      const int rows = static_cast<int>(std::min<int64_t>(4, t.r1 - r));
      for (int j = 0; j < 4; ++j) {
        const auto* src =
            reinterpret_cast<const Block*>(t.w + (r + std::min(j, rows - 1)) * t.w_stride);
        for (int64_t b = 0; b < nb; ++b) {
          auto* dst = reinterpret_cast<__m256i*>(panel.codes + (j * nb + b) * 32);
          if constexpr (kUnsigned) {
            _mm256_store_si256(dst, Nibbles(src[b]));
          } else {
            _mm256_store_si256(dst, Codes(src[b]));
          }
          const float d = _cvtsh_ss(src[b].d);
          panel.scales[8 * b + 2 * j] = d;
          panel.scales[8 * b + 2 * j + 1] = d;
        }
      }
      for (int64_t p = 0; p < pairs; ++p) {
        const int64_t i = i0 + 2 * p;
        Tile4x2<kUnsigned>(panel, nb, xrow(i), xrow(i + 1), xs + p * nb * 2, x8s + p * nb * 2,
                           t.y + i * t.ldy + r, t.ldy, rows);
      }
      if (i0 + 2 * pairs < i1) {
        const int64_t i = i1 - 1;
        Tile4x1Panel<kUnsigned>(panel, nb, xrow(i), t.y + i * t.ldy + r, rows);
      }
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
