// The AVX2 matmul of 16-row-grouped Q4_0 weights (avx2_grouped.h). Compiled with -mavx2
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
#include "kernels/cpu/avx2_util.h"
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

// Tokens per register pass: a matmul of up to kOnePass tokens runs them in one pass over
// each group, more in passes of up to kPass, nearly equal. Measured (kernel_bench BM_MatMul
// Q4_0, this table on Zen 4, one thread, GFLOP/s, two rounds) with passes of 2 / 3 / 4:
// 4 tokens 129-160 / 141-148 / 140-170, 16 tokens 129-148 / 119-158 / 154-158, 128 tokens
// 133-136 / 119-153 / 140-169. (Four tokens hold 16 of the 16 registers with the codes;
// the compiler keeps the float sums, touched once per block, in memory.)
constexpr int kPass = 4;
constexpr int kOnePass = 4;

}  // namespace

bool GroupsType(TensorType type) { return type == TensorType::kQ4_0; }

size_t GroupedTokensBytes(TensorType type, int64_t n, int64_t k) {
  (void)type;
  return static_cast<size_t>(n) * static_cast<size_t>(k / kQK) * sizeof(GroupedToken);
}

void PrepareGroupedTokens(TensorType type, const float* x, int64_t k, int64_t n, int64_t i0,
                          int64_t i1, uint8_t* out) {
  (void)type;
  const int64_t nb = k / kQK;
  auto* tokens = reinterpret_cast<GroupedToken*>(out);
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      BlockQ8_0 blk;
      QuantizeQ8_0Row(x + i * k + b * kQK, kQK, &blk);
      GroupedToken& t = tokens[b * n + i];
      std::memcpy(t.qs, blk.qs, sizeof(t.qs));
      t.d = _cvtsh_ss(blk.d);
      int32_t sum = 0;
      for (int8_t c : blk.qs) sum += c;
      t.base = -8 * sum;
    }
  }
}

void GroupedMatmul(const MatmulTask& t, TensorType type) {
  (void)type;
  const int64_t nb = t.k / kQK;
  const size_t group_bytes = kRowGroup * t.w_stride;
  const auto* x = reinterpret_cast<const GroupedToken*>(t.x);
  SweepGroups<kOnePass, kPass>(t, [&]<int T>(int64_t g, int64_t i) {
    GroupPass<T>(t.w + (g / kRowGroup) * group_bytes, nb, x + i, t.n, t.y + i * t.ldy + g, t.ldy);
  });
}

}  // namespace cascade::cpu::avx2
