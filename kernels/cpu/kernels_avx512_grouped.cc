// The AVX-512 VNNI matmul of 16-row-grouped Q8_0 / Q4_0 / Q4_K weights (avx512_grouped.h).
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
// Q4_K the same way per super-block of 256: per sub-block of 32, 8 vpdpbusd (low nibbles:
// the even sub-block, high: the odd one) give each row's exact dot product in its lane,
// times that row's 6-bit scale (vpmulld, the scales unpacked from the three packed words
// of 16 rows at once) into S; the mins' term M is 4 vpdpwssd of the rows' min pairs by the
// token's sub-block sums; then acc = fma(S, d * d_x, acc), acc = fma(-M, dmin * d_x, acc),
// as the AVX2 kernel does.
//
// Q4_0 / Q8_0 passes of two or more tokens take two adjacent groups at once (PairPass):
// each broadcast of a token's 4 codes then feeds two vpdpbusd, not one. With one broadcast
// per vpdpbusd the loop ran at ~80% of the vpdpbusd rate before its scale tail (Zen 5:
// about 4.6 broadcast-fed vpdpbusd per ns against 7.1 from registers).
//
// Compiled for AVX-512 F/BW/VL/DQ + VNNI in one region after every include (isa_target.h).

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx512_grouped.h"
#include "kernels/cpu/grouped_sweep.h"
#include "kernels/cpu/grouped_token.h"
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/row_groups.h"
#include "tensor/quant.h"
#include "tensor/tensor_type.h"

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
    if constexpr (T >= 8) PrefetchAhead(g, kBlock);
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

// Two adjacent groups (g: the first's block 0, gs bytes to the second's) x T tokens, as
// GroupPass gives each (the same S, the same tail, so the same bits), with the 4 codes of
// a token broadcast once for both groups' vpdpbusd (see the top of this file). The chunks
// are taken one at a time (q outer) so that the 2T sums, not 16 code registers, stay live.
// first, next_part, next_parts: as PairStep (grouped_sweep.h) says. The first pass, of 4
// tokens or more, prefetches 9 KiB ahead into L1 (PrefetchAhead); the later passes find the
// groups in L1/L2 and prefetch nothing of them (measured, Zen 5, three alternated rounds,
// GOP/s one / two threads, `BM_MatMul` Q8_0 n:128 614-633 / 1200-1219 with every pass
// prefetching against 668-674 / 1275-1309; Q4_0 unchanged). With next_parts > 0 the passes
// share bringing the next pair (gs bytes on) into L2: pass next_part, one block every
// next_parts blocks of its own, takes the next pair's blocks from ceil(next_part * nb /
// next_parts) on, so over the passes every block comes once and the memory works through
// all of them. The first pass alone bringing the whole next pair left the memory idle in the
// later ones and made the first pass wait for it (Zen 5, 2026-12-04, four alternated rounds,
// `BM_DecodeLayers` Q4_0 tokens:16 GFLOP/s one / two threads, 473-522 / 791-855 against
// 529-575 / 873-936 shared; `BM_MatMul` Q4_0 n:8, n:12, n:16 on two threads 0-9% faster;
// the next pair but one instead of the next: no better).
template <bool kQ8, int T>
void PairPass(const uint8_t* g, size_t gs, int64_t nb, const GroupedToken* x, int64_t xs, float* y,
              int64_t ldy, bool first, int next_part, int next_parts) {
  constexpr size_t kBlock = kRowGroup * (kQ8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0));
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[2][T];
  for (int j = 0; j < T; ++j) acc[0][j] = acc[1][j] = _mm512_setzero_ps();
  // This pass's share of the next pair: counting the passes' blocks one after another
  // (next_part * nb + b), every next_parts-th brings the next pair's block count /
  // next_parts. wait: blocks until the next one does (never 0 without a share).
  const int64_t first_count = int64_t{next_part} * nb;
  int64_t wait = next_parts > 0 ? (next_parts - first_count % next_parts) % next_parts : -1;
  const uint8_t* next_block =
      next_parts > 0 ? g + 2 * gs + (first_count + wait) / next_parts * kBlock : nullptr;
  for (int64_t b = 0; b < nb; ++b, g += kBlock, x += xs) {
    if (T >= 4 && first) {
      PrefetchAhead(g, kBlock);
      PrefetchAhead(g + gs, kBlock);
    }
    if (wait == 0) {
      PrefetchBytes<CacheLevel::kL2>(next_block, kBlock);
      PrefetchBytes<CacheLevel::kL2>(next_block + gs, kBlock);
      next_block += kBlock;
      wait = next_parts;
    }
    --wait;
    __m512i s[2][T];
    for (int j = 0; j < T; ++j) s[0][j] = s[1][j] = _mm512_set1_epi32(x[j].base);
    const uint8_t* codes = g + 2 * kRowGroup;
    for (int q = 0; q < 4; ++q) {
      __m512i lo[2], hi[2];  // elements 4q .. 4q + 3 and 16 + 4q .. 16 + 4q + 3
      for (int r = 0; r < 2; ++r) {
        const uint8_t* c = codes + r * gs + 64 * q;
        if constexpr (kQ8) {
          lo[r] = _mm512_loadu_si512(c);
          hi[r] = _mm512_loadu_si512(c + 256);
        } else {
          const __m512i v = _mm512_loadu_si512(c);
          lo[r] = _mm512_and_si512(v, m4);
          hi[r] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
      }
      for (int j = 0; j < T; ++j) {
        const __m512i xl = Bcast4(x[j].qs + 4 * q);
        const __m512i xh = Bcast4(x[j].qs + 16 + 4 * q);
        for (int r = 0; r < 2; ++r) s[r][j] = _mm512_dpbusd_epi32(s[r][j], lo[r], xl);
        for (int r = 0; r < 2; ++r) s[r][j] = _mm512_dpbusd_epi32(s[r][j], hi[r], xh);
      }
    }
    for (int r = 0; r < 2; ++r) {
      const __m512 wd =
          _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + r * gs)));
      for (int j = 0; j < T; ++j) {
        const __m512 d = _mm512_mul_ps(wd, _mm512_set1_ps(x[j].d));
        acc[r][j] = _mm512_fmadd_ps(
            _mm512_maskz_cvtepi32_ps(static_cast<__mmask16>(0xFFFF), s[r][j]), d, acc[r][j]);
      }
    }
  }
  for (int j = 0; j < T; ++j) {
    _mm512_storeu_ps(y + j * ldy, acc[0][j]);
    _mm512_storeu_ps(y + j * ldy + kRowGroup, acc[1][j]);
  }
}

// Each row's 6-bit scale of sub-block `sub` (0..7) in its lane: byte sub % 4 of lo (sub <
// 4) or hi.
template <int kSub>
CASCADE_HOT __m512i SubBlockScale(__m512i lo, __m512i hi) {
  const __m512i w = kSub < 4 ? lo : hi;
  return _mm512_and_si512(_mm512_srli_epi32(w, 8 * (kSub % 4)), _mm512_set1_epi32(0xFF));
}

// Q4_K: one group (g: its super-block 0) x T tokens (x: the tokens' super-block 0, xs tokens
// apart) over nb super-blocks; y as GroupPass's.
template <int T, bool kPrefetch>
void KGroupPass(const uint8_t* g, int64_t nb, const GroupedKToken* x, int64_t xs, float* y,
                int64_t ldy) {
  constexpr size_t kBlock = kRowGroup * sizeof(BlockQ4K);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m6 = _mm512_set1_epi8(0x3F);
  const __m512i bytes02 = _mm512_set1_epi32(0x00FF00FF);
  __m512 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, g += kBlock, x += xs) {
    if constexpr (kPrefetch) PrefetchAhead(g, kBlock);
    // The packed scale and min words of the 16 rows -> bytes 0-3 (sub-blocks 0-3) and 4-7,
    // as ScaleMinBytesK4 (avx512_decode) unpacks one row's.
    const __m512i wa = _mm512_loadu_si512(g + 64);
    const __m512i wb = _mm512_loadu_si512(g + 128);
    const __m512i wc = _mm512_loadu_si512(g + 192);
    const __m512i m30 = _mm512_set1_epi8(0x30);
    const __m512i sc_lo = _mm512_and_si512(wa, m6);
    const __m512i sc_hi =
        _mm512_ternarylogic_epi32(_mm512_and_si512(wc, m4), _mm512_srli_epi32(wa, 2), m30, 0xF8);
    __m512i s[T];
    for (int j = 0; j < T; ++j) s[j] = _mm512_setzero_si512();
    const uint8_t* codes = g + 256;
    // Sub-blocks 2p (low nibbles) and 2p + 1 (high) of each 64 elements p.
    auto pair = [&]<int kP>() {
      __m512i lo[T], hi[T];
      for (int j = 0; j < T; ++j) lo[j] = hi[j] = _mm512_setzero_si512();
      for (int q = 0; q < 8; ++q) {
        const __m512i v = _mm512_loadu_si512(codes + 64 * (8 * kP + q));
        const __m512i cl = _mm512_and_si512(v, m4);
        const __m512i ch = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        for (int j = 0; j < T; ++j) {
          lo[j] = _mm512_dpbusd_epi32(lo[j], cl, Bcast4(x[j].qs + 64 * kP + 4 * q));
          hi[j] = _mm512_dpbusd_epi32(hi[j], ch, Bcast4(x[j].qs + 64 * kP + 32 + 4 * q));
        }
      }
      const __m512i se = SubBlockScale<2 * kP>(sc_lo, sc_hi);
      const __m512i so = SubBlockScale<2 * kP + 1>(sc_lo, sc_hi);
      for (int j = 0; j < T; ++j) {
        s[j] = _mm512_add_epi32(
            s[j], _mm512_add_epi32(_mm512_mullo_epi32(lo[j], se), _mm512_mullo_epi32(hi[j], so)));
      }
    };
    pair.template operator()<0>();
    pair.template operator()<1>();
    pair.template operator()<2>();
    pair.template operator()<3>();
    // The mins as int16 pairs (0, 2), (1, 3), (4, 6), (5, 7) per lane.
    const __m512i m_lo = _mm512_and_si512(wb, m6);
    const __m512i m_hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi32(wc, 4), m4),
                                                   _mm512_srli_epi32(wb, 2), m30, 0xF8);
    const __m512i mp[4] = {
        _mm512_and_si512(m_lo, bytes02), _mm512_and_si512(_mm512_srli_epi32(m_lo, 8), bytes02),
        _mm512_and_si512(m_hi, bytes02), _mm512_and_si512(_mm512_srli_epi32(m_hi, 8), bytes02)};
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
    const __m512 dmin =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 32)));
    for (int j = 0; j < T; ++j) {
      __m512i m = _mm512_setzero_si512();
      for (int i = 0; i < 4; ++i)
        m = _mm512_dpwssd_epi32(m, mp[i], _mm512_set1_epi32(x[j].sum_pairs[i]));
      const __m512 dx = _mm512_set1_ps(x[j].d);
      acc[j] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(static_cast<__mmask16>(0xFFFF), s[j]),
                               _mm512_mul_ps(d, dx), acc[j]);
      acc[j] = _mm512_fnmadd_ps(_mm512_maskz_cvtepi32_ps(static_cast<__mmask16>(0xFFFF), m),
                                _mm512_mul_ps(dmin, dx), acc[j]);
    }
  }
  for (int j = 0; j < T; ++j) _mm512_storeu_ps(y + j * ldy, acc[j]);
}

// The weight formats: elements per block, the prepared token type and the passes. A matmul
// of up to kOnePass tokens runs them in one pass over each group; more tokens run in passes
// of up to kPass, nearly equal (kPass <= kOnePass). Q4_0 from two tokens on, and Q8_0 from
// kPairsFrom on, run pairs of groups (PairPass) in passes of up to kPairPass instead.
//
// Measured (kernel_bench, Zen 5, 2026-12-03, binaries alternated, GOP/s on 1 / 2 threads),
// one group per pass as above against pairs in passes of up to 6: BM_MatMul Q4_0 n=16
// 553-554 / 970-981 against 613-641 / 1120-1130, n=128 533-548 / 1048-1057 against 620-654 /
// 1192-1225 (pairs in passes of 8 or 5: n=128 on 2 threads 1039-1130, 1122-1175); Q8_0
// n=128 544 / 1040 against 590 / 1170. A 16-token decode step streams its weights from
// memory (BM_DecodeLayers tokens:16, 3 rounds): Q4_0 510-543 / 880-1034 against 608-621 /
// 955-1005 with the next pair prefetched (PairPass); Q8_0, whose pairs are twice the bytes,
// lost there (470-515 / 817-897 against 455-471 / 694-773), so it pairs only past that.
// Before (Zen 4 VM): Q4_0 in one pass of 16 against two of 8: n=16 357 / 663 against 327 /
// 587; Q8_0's one-group pass of 16 spilled (n=16: 144 GOP/s). Q4_K's passes of 8 against 4
// (one thread, two rounds): n=16 175-244 against 235-301, n=128 208-278 against 274-323.
template <bool kQ8>
struct Q40Format {
  using Token = GroupedToken;
  static constexpr int64_t kElems = kQK;
  static constexpr int kPass = 8;
  static constexpr int kOnePass = kQ8 ? 8 : 16;
  static constexpr bool kPairs = true;
  static constexpr int64_t kPairsFrom = kQ8 ? 17 : 2;
  static constexpr int kPairPass = 6;
  template <int T>
  static void Pass(const uint8_t* g, int64_t nb, const Token* x, int64_t xs, float* y,
                   int64_t ldy) {
    GroupPass<kQ8, T>(g, nb, x, xs, y, ldy);
  }
  template <int T>
  static void Pair(const uint8_t* g, size_t gs, int64_t nb, const Token* x, int64_t xs, float* y,
                   int64_t ldy, bool first, int next_part, int next_parts) {
    PairPass<kQ8, T>(g, gs, nb, x, xs, y, ldy, first, next_part, next_parts);
  }
};
template <bool kPrefetch>
struct Q4KFormat {
  using Token = GroupedKToken;
  static constexpr int64_t kElems = kQKK;
  static constexpr int kPass = 4;
  static constexpr int kOnePass = 4;
  static constexpr bool kPairs = false;
  template <int T>
  static void Pass(const uint8_t* g, int64_t nb, const Token* x, int64_t xs, float* y,
                   int64_t ldy) {
    KGroupPass<T, kPrefetch>(g, nb, x, xs, y, ldy);
  }
};

// Calls f.template operator()<F>() with the format of a groupable `type`.
template <bool kPrefetchQ4K, class Fn>
void WithFormat(TensorType type, Fn&& f) {
  switch (type) {
    case TensorType::kQ8_0:
      f.template operator()<Q40Format<true>>();
      return;
    case TensorType::kQ4_K:
      f.template operator()<Q4KFormat<kPrefetchQ4K>>();
      return;
    default:
      f.template operator()<Q40Format<false>>();
      return;
  }
}

template <class F>
void GroupedMatmulOf(const MatmulTask& t) {
  const int64_t nb = t.k / F::kElems;
  const size_t group_bytes = kRowGroup * t.w_stride;
  const auto* x = reinterpret_cast<const typename F::Token*>(t.x);
  auto group = [&](int64_t g) { return t.w + (g / kRowGroup) * group_bytes; };
  if constexpr (F::kPairs) {
    if (t.n >= F::kPairsFrom) {
      SweepGroups<F::kPairPass, F::kPairPass, 2>(t, [&]<int T>(const PairStep& p) {
        float* y = t.y + p.i * t.ldy + p.g;
        if (p.groups == 2) {
          F::template Pair<T>(group(p.g), group_bytes, nb, x + p.i, t.n, y, t.ldy, p.first,
                              p.next_part, p.next_parts);
        } else {
          F::template Pass<T>(group(p.g), nb, x + p.i, t.n, y, t.ldy);
        }
      });
      return;
    }
  }
  SweepGroups<F::kOnePass, F::kPass>(t, [&]<int T>(int64_t g, int64_t i) {
    F::template Pass<T>(group(g), nb, x + i, t.n, t.y + i * t.ldy + g, t.ldy);
  });
}

template <bool kPrefetchQ4K>
void GroupedMatmul(const MatmulTask& t, TensorType type) {
  WithFormat<kPrefetchQ4K>(type, [&]<class F>() { GroupedMatmulOf<F>(t); });
}

}  // namespace

bool GroupsType(TensorType type) {
  return type == TensorType::kQ8_0 || type == TensorType::kQ4_0 || type == TensorType::kQ4_K;
}

GroupedMatmulFn GroupedMatmulFor(bool prefetch_q4k) {
  return prefetch_q4k ? &GroupedMatmul<true> : &GroupedMatmul<false>;
}

}  // namespace cascade::cpu::avx512

CASCADE_TARGET_END()
