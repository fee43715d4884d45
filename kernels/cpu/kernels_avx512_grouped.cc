// The AVX-512 VNNI matmul of 16-row-grouped Q8_0 / Q4_0 weights (avx512_grouped.h).
//
// Per group of 16 rows and block b of 32 elements, the 16 rows' bytes come as one run:
// their 16 fp16 scales (one vcvtph2ps gives the 16 d_w), then 4 (Q4_0) or 8 (Q8_0) 64-byte
// chunks, chunk c holding each row's code bytes 4c .. 4c + 3 in that row's 32-bit lane
// (Q4_0 split into low and high nibbles: elements 4c.. and 16 + 4c..). Each token then
// needs 8 vpdpbusd, whose other operand is the token's 4 matching codes broadcast from
// memory, starting from the token's -8 sum(x) (Q4_0: nibbles are code + 8) or -128 sum(x)
// (Q8_0: codes are stored + 128): lane r ends holding row r's exact S. Then, as the AVX2
// kernels do, acc = fma(S, d_w * d_x, acc): one instruction for 16 outputs. Against the
// file's layout (avx512_decode.h) this drops the per-token shuffle tree that gathered
// each row's sum from 4 lanes, the 16 strided loads and inserts per block, and the scale
// assembly in general registers.
//
// Compiled for AVX-512 F/BW/VL/DQ + VNNI in one region after every include (isa_target.h).

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx512_grouped.h"
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/row_groups.h"
#include "kernels/cpu/with_width.h"
#include "tensor/quant.h"
#include "tensor/tensor_type.h"

namespace cascade::cpu::avx512 {
namespace {

// A token's block as the kernel reads it: the codes, the scale as float and the integer S
// starts from. Stored (block, token): one pointer per block reaches every token, at
// offsets the instructions carry as constants.
struct GroupedToken {
  int8_t qs[32];
  float d;
  int32_t base;
};
static_assert(sizeof(GroupedToken) == 40);

}  // namespace

size_t GroupedTokensBytes(int64_t n, int64_t k) {
  return static_cast<size_t>(n) * static_cast<size_t>(k / kQK) * sizeof(GroupedToken);
}

}  // namespace cascade::cpu::avx512

CASCADE_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi2")

#include "kernels/cpu/avx512_quant_util.h"

namespace cascade::cpu::avx512 {
namespace {

CASCADE_HOT __m512i Bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// One group (g: its block 0) x T tokens (x: the tokens' block 0, blocks xs tokens apart)
// over nb blocks; y: the group's first output of token 0, tokens ldy apart.
template <bool kQ8, int T>
void GroupPass(const uint8_t* g, int64_t nb, const GroupedToken* x, int64_t xs, float* y,
               int64_t ldy) {
  constexpr size_t kBlock = kRowGroup * (kQ8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0));
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, g += kBlock, x += xs) {
    const __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
    const uint8_t* codes = g + 2 * kRowGroup;
    __m512i c[8];
    if constexpr (kQ8) {
      for (int q = 0; q < 8; ++q) c[q] = _mm512_loadu_si512(codes + 64 * q);
    } else {
      for (int q = 0; q < 4; ++q) {
        const __m512i v = _mm512_loadu_si512(codes + 64 * q);
        c[q] = _mm512_and_si512(v, m4);
        c[q + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      }
    }
    for (int j = 0; j < T; ++j) {
      // Two chains of four (the low and the high 16 elements), so that a pass of few
      // tokens is not held up by the vpdpbusd latency.
      __m512i s0 = _mm512_set1_epi32(x[j].base);
      __m512i s1 = _mm512_setzero_si512();
      for (int q = 0; q < 4; ++q) {
        s0 = _mm512_dpbusd_epi32(s0, c[q], Bcast4(x[j].qs + 4 * q));
        s1 = _mm512_dpbusd_epi32(s1, c[q + 4], Bcast4(x[j].qs + 16 + 4 * q));
      }
      const __m512i s = _mm512_add_epi32(s0, s1);
      const __m512 d = _mm512_mul_ps(wd, _mm512_set1_ps(x[j].d));
      acc[j] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(static_cast<__mmask16>(0xFFFF), s), d,
                               acc[j]);
    }
  }
  for (int j = 0; j < T; ++j) _mm512_storeu_ps(y + j * ldy, acc[j]);
}

template <bool kQ8>
void GroupedMatmulOf(const MatmulTask& t) {
  const int64_t nb = t.k / kQK;
  const size_t group_bytes = kRowGroup * t.w_stride;
  const auto* x = reinterpret_cast<const GroupedToken*>(t.x);
  const int64_t passes = (t.n + kGroupedPassTokens - 1) / kGroupedPassTokens;
  const int64_t width = (t.n + passes - 1) / passes;
  // Rows each pass sweeps: one group when the passes are few (decode: each group comes
  // from memory once and the later passes find it in L1/L2); 8 groups (at most ~0.8 MiB of
  // Q8_0 rows of 5632, in L2) when they are many (prefill), so that a pass's tokens stay
  // in L1 while the groups go by.
  const int64_t sweep = passes <= 2 ? kRowGroup : 8 * kRowGroup;
  for (int64_t r = t.r0; r < t.r1; r += sweep) {
    const int64_t end = std::min(r + sweep, t.r1);
    for (int64_t i = 0; i < t.n; i += width) {
      WithWidth<kGroupedPassTokens>(std::min(width, t.n - i), [&]<int T>() {
        for (int64_t g = r; g < end; g += kRowGroup) {
          GroupPass<kQ8, T>(t.w + (g / kRowGroup) * group_bytes, nb, x + i, t.n,
                            t.y + i * t.ldy + g, t.ldy);
        }
      });
    }
  }
}

}  // namespace

void PrepareGroupedTokens(TensorType type, const float* x, int64_t k, int64_t n, int64_t i0,
                          int64_t i1, uint8_t* out) {
  const int64_t nb = k / kQK;
  const int32_t offset = type == TensorType::kQ8_0 ? -128 : -8;
  const auto quantize = Avx2Kernels().quantize_q8_0;
  auto* tokens = reinterpret_cast<GroupedToken*>(out);
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      BlockQ8_0 blk;
      quantize(x + i * k + b * kQK, kQK, &blk);
      GroupedToken& o = tokens[b * n + i];
      std::memcpy(o.qs, blk.qs, sizeof(o.qs));
      o.d = _cvtsh_ss(blk.d);
      o.base = offset * CodeSum(blk.qs);
    }
  }
}

void GroupedMatmul(const MatmulTask& t, TensorType type) {
  if (type == TensorType::kQ8_0) {
    GroupedMatmulOf<true>(t);
  } else {
    GroupedMatmulOf<false>(t);
  }
}

}  // namespace cascade::cpu::avx512

CASCADE_TARGET_END()
