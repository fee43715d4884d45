// The AVX2 matmul of 16-row-grouped Q4_0 and Q4_K weights (avx2_grouped.h). Compiled with -mavx2
// -mfma -mf16c; reached only after run-time detection says the CPU has them.
//
// Per group of 16 rows and block b of 32 elements, the rows' bytes are one run of 288
// (row_groups.h): 16 fp16 scales, then 4 chunks of 64 bytes, chunk c holding each row's
// code bytes 4c .. 4c + 3 in that row's 32-bit lane (low nibbles: elements 4c .., high:
// 16 + 4c ..). Each 32-byte half (rows 0-7, rows 8-15) is one register; per token and
// chunk, two vpmaddubsw (low nibbles by the token's codes 4c .., high by 16 + 4c ..) add
// each row's 4 products pairwise into that row's two int16 lanes. Over the block's 4 chunks
// those lanes add up in int16, one vpmaddwd by 1 then gives each row's sum of nibble x code
// in its 32-bit lane, and the token's -8 sum(x) makes it the exact S of the signed codes.
// Then, as the file-layout kernel does, acc = fma(S, d_w * d_x, acc).

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_grouped.h"
#include "kernels/cpu/grouped_sweep.h"
#include "kernels/cpu/grouped_token.h"
#include "kernels/cpu/row_groups.h"
#include "tensor/quant.h"
#include "tensor/tensor_type.h"

namespace cascade::cpu::avx2 {
namespace {

inline __m256i Bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// One group (g: its block 0) x T tokens (x: the tokens' block 0, blocks xs tokens apart)
// over nb blocks; y: the group's first output of token 0, tokens ldy apart.
template <int T>
void GroupPass(const uint8_t* g, int64_t nb, const GroupedToken* x, int64_t xs, float* y,
               int64_t ldy) {
  constexpr size_t kBlock = kRowGroup * sizeof(BlockQ4_0);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 lo[T], hi[T];  // rows 0-7 and 8-15 of each token
  for (int j = 0; j < T; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, g += kBlock, x += xs) {
    if constexpr (T >= 4) PrefetchAhead(g, kBlock);
    const uint8_t* codes = g + 2 * kRowGroup;
    __m256i sl[T], sh[T];  // int16 pair sums, rows 0-7 and 8-15
    for (int q = 0; q < 4; ++q) {
      const __m256i vl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * q));
      const __m256i vh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 64 * q + 32));
      const __m256i ll = _mm256_and_si256(vl, m4);
      const __m256i lh = _mm256_and_si256(_mm256_srli_epi16(vl, 4), m4);
      const __m256i hl = _mm256_and_si256(vh, m4);
      const __m256i hh = _mm256_and_si256(_mm256_srli_epi16(vh, 4), m4);
      for (int j = 0; j < T; ++j) {
        const __m256i xa = Bcast4(x[j].qs + 4 * q);
        const __m256i xb = Bcast4(x[j].qs + 16 + 4 * q);
        const __m256i pl =
            _mm256_add_epi16(_mm256_maddubs_epi16(ll, xa), _mm256_maddubs_epi16(lh, xb));
        const __m256i ph =
            _mm256_add_epi16(_mm256_maddubs_epi16(hl, xa), _mm256_maddubs_epi16(hh, xb));
        sl[j] = q == 0 ? pl : _mm256_add_epi16(sl[j], pl);
        sh[j] = q == 0 ? ph : _mm256_add_epi16(sh[j], ph);
      }
    }
    const __m256 wl = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g)));
    const __m256 wh = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16)));
    const __m256i ones = _mm256_set1_epi16(1);
    for (int j = 0; j < T; ++j) {
      const __m256i base = _mm256_set1_epi32(x[j].base);
      const __m256 xd = _mm256_set1_ps(x[j].d);
      const __m256i s0 = _mm256_add_epi32(_mm256_madd_epi16(sl[j], ones), base);
      const __m256i s1 = _mm256_add_epi32(_mm256_madd_epi16(sh[j], ones), base);
      lo[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(wl, xd), lo[j]);
      hi[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(wh, xd), hi[j]);
    }
  }
  for (int j = 0; j < T; ++j) {
    _mm256_storeu_ps(y + j * ldy, lo[j]);
    _mm256_storeu_ps(y + j * ldy + 8, hi[j]);
  }
}

// Each row's 6-bit scale of sub-block kSub (0..7) in its 32-bit lane, as int16 in both
// halves (vpmaddwd then multiplies both pair sums of a row by it): byte kSub % 4 of lo
// (kSub < 4) or hi.
template <int kSub>
inline __m256i SubBlockScale16(__m256i lo, __m256i hi) {
  const __m256i w = kSub < 4 ? lo : hi;
  const __m256i s = _mm256_and_si256(_mm256_srli_epi32(w, 8 * (kSub % 4)), _mm256_set1_epi32(0xFF));
  return _mm256_or_si256(s, _mm256_slli_epi32(s, 16));
}

// Q4_K: one group (g: its super-block 0) x T tokens (x: the tokens' super-block 0, xs
// tokens apart) over nb super-blocks; y as GroupPass's. Per half of the group (8 rows) and
// sub-block, the nibbles' pair sums by the token's codes add up in int16 over the
// sub-block's 8 chunks (at most 30480), and one vpmaddwd by the rows' scale (at most 63)
// gives scale x sum in each row's lane; the mins' term M is 4 vpmaddwd of the rows' min
// pairs by the token's sub-block sums. Then, as the file-layout kernel does,
// acc = fma(S, d * d_x, acc), acc = fma(-M, dmin * d_x, acc).
template <int T, bool kPrefetch>
void KGroupPass(const uint8_t* g, int64_t nb, const GroupedKToken* x, int64_t xs, float* y,
                int64_t ldy) {
  constexpr size_t kBlock = kRowGroup * sizeof(BlockQ4K);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m6 = _mm256_set1_epi8(0x3F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  const __m256i bytes02 = _mm256_set1_epi32(0x00FF00FF);
  __m256 acc[2][T];  // rows 0-7 and 8-15 of each token
  for (int j = 0; j < T; ++j) acc[0][j] = acc[1][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, g += kBlock, x += xs) {
    if constexpr (kPrefetch) PrefetchAhead(g, kBlock);
    for (int h = 0; h < 2; ++h) {
      // The packed scale and min words of the half's 8 rows -> bytes 0-3 (sub-blocks 0-3)
      // and 4-7, as the AVX-512 kernel unpacks 16 rows'.
      auto load = [&](size_t off) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + off + 32 * h));
      };
      const __m256i wa = load(64), wb = load(128), wc = load(192);
      const __m256i sc_lo = _mm256_and_si256(wa, m6);
      const __m256i sc_hi = _mm256_or_si256(_mm256_and_si256(wc, m4),
                                            _mm256_and_si256(_mm256_srli_epi32(wa, 2), m30));
      __m256i s[T];
      for (int j = 0; j < T; ++j) s[j] = _mm256_setzero_si256();
      // Sub-blocks 2p (low nibbles) and 2p + 1 (high) of each 64 elements p.
      auto pair = [&]<int kP>() {
        __m256i lo[T] = {}, hi[T] = {};  // set at q = 0 (initialized for gcc's flow analysis)
        for (int q = 0; q < 8; ++q) {
          const __m256i v = load(256 + 64 * (8 * kP + q));
          const __m256i cl = _mm256_and_si256(v, m4);
          const __m256i ch = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          for (int j = 0; j < T; ++j) {
            const __m256i pl = _mm256_maddubs_epi16(cl, Bcast4(x[j].qs + 64 * kP + 4 * q));
            const __m256i ph = _mm256_maddubs_epi16(ch, Bcast4(x[j].qs + 64 * kP + 32 + 4 * q));
            lo[j] = q == 0 ? pl : _mm256_add_epi16(lo[j], pl);
            hi[j] = q == 0 ? ph : _mm256_add_epi16(hi[j], ph);
          }
        }
        const __m256i se = SubBlockScale16<2 * kP>(sc_lo, sc_hi);
        const __m256i so = SubBlockScale16<2 * kP + 1>(sc_lo, sc_hi);
        for (int j = 0; j < T; ++j) {
          s[j] = _mm256_add_epi32(
              s[j], _mm256_add_epi32(_mm256_madd_epi16(lo[j], se), _mm256_madd_epi16(hi[j], so)));
        }
      };
      pair.template operator()<0>();
      pair.template operator()<1>();
      pair.template operator()<2>();
      pair.template operator()<3>();
      // The mins as int16 pairs (0, 2), (1, 3), (4, 6), (5, 7) per lane.
      const __m256i m_lo = _mm256_and_si256(wb, m6);
      const __m256i m_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(wc, 4), m4),
                                           _mm256_and_si256(_mm256_srli_epi32(wb, 2), m30));
      const __m256i mp[4] = {
          _mm256_and_si256(m_lo, bytes02), _mm256_and_si256(_mm256_srli_epi32(m_lo, 8), bytes02),
          _mm256_and_si256(m_hi, bytes02), _mm256_and_si256(_mm256_srli_epi32(m_hi, 8), bytes02)};
      const __m256 d =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 16 * h)));
      const __m256 dmin =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + 32 + 16 * h)));
      for (int j = 0; j < T; ++j) {
        __m256i m = _mm256_madd_epi16(mp[0], _mm256_set1_epi32(x[j].sum_pairs[0]));
        for (int i = 1; i < 4; ++i) {
          m = _mm256_add_epi32(m, _mm256_madd_epi16(mp[i], _mm256_set1_epi32(x[j].sum_pairs[i])));
        }
        const __m256 dx = _mm256_set1_ps(x[j].d);
        acc[h][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[j]), _mm256_mul_ps(d, dx), acc[h][j]);
        acc[h][j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmin, dx), acc[h][j]);
      }
    }
  }
  for (int j = 0; j < T; ++j) {
    _mm256_storeu_ps(y + j * ldy, acc[0][j]);
    _mm256_storeu_ps(y + j * ldy + 8, acc[1][j]);
  }
}

// Tokens per register pass: a matmul of up to kOnePass tokens runs them in one pass over
// each group, more in passes of up to kPass, nearly equal. Measured (kernel_bench BM_MatMul
// Q4_0, this table on Zen 4, one thread, GFLOP/s, two rounds) with passes of 2 / 3 / 4:
// 4 tokens 129-160 / 141-148 / 140-170, 16 tokens 129-148 / 119-158 / 154-158, 128 tokens
// 133-136 / 119-153 / 140-169. (Four tokens hold 16 of the 16 registers with the codes;
// the compiler keeps the float sums, touched once per block, in memory.)
constexpr int kPass = 4;
constexpr int kOnePass = 4;
// Q4_K: passes of 8 (Zen 4, one thread, GFLOP/s; file layout -> passes of 2 / 4 / 8):
// 1 token 54 -> 88-92; 4 tokens 90-95 -> 101 / 118-130 / 139-141; 16 tokens 91-94 -> 101 /
// 112-125 / 134-137; 128 tokens 166-192 -> 105 / 130-148 / 149-160. The file layout's
// 8-row panels (from 32 tokens) stay ahead at prefill by 10-20%: the price of decode
// 1.6x as fast, with one layout per weight. A variant unpacking each super-block's nibbles
// once into an L1 buffer for the tokens to run through one at a time gave 111-124 at 128.
constexpr int kKPass = 8;

template <bool kPrefetchQ4K>
void GroupedMatmul(const MatmulTask& t, TensorType type) {
  const size_t group_bytes = kRowGroup * t.w_stride;
  if (type == TensorType::kQ4_K) {
    const auto* x = reinterpret_cast<const GroupedKToken*>(t.x);
    SweepGroups<kKPass, kKPass>(t, [&]<int T>(int64_t g, int64_t i) {
      KGroupPass<T, kPrefetchQ4K>(t.w + (g / kRowGroup) * group_bytes, t.k / kQKK, x + i, t.n,
                                  t.y + i * t.ldy + g, t.ldy);
    });
    return;
  }
  const auto* x = reinterpret_cast<const GroupedToken*>(t.x);
  SweepGroups<kOnePass, kPass>(t, [&]<int T>(int64_t g, int64_t i) {
    GroupPass<T>(t.w + (g / kRowGroup) * group_bytes, t.k / kQK, x + i, t.n, t.y + i * t.ldy + g,
                 t.ldy);
  });
}

}  // namespace

bool GroupsType(TensorType type) { return type == TensorType::kQ4_0 || type == TensorType::kQ4_K; }

GroupedMatmulFn GroupedMatmulFor(bool prefetch_q4k) {
  return prefetch_q4k ? &GroupedMatmul<true> : &GroupedMatmul<false>;
}

}  // namespace cascade::cpu::avx2
