// AVX-512 attention over the paged KV cache: kernels_avx2_attention.cc's algorithm and
// order in 16-float registers, bit for bit its results (the AVX-512 table's contract):
// - scores of two heads of the group at once, head g in the low and g + 1 in the high
//   256-bit half of each register, and two such pairs per broadcast K row (AVX2: one
//   head, 8 FMAs per position and step); each half is reduced exactly as the AVX2 Scores8
//   reduces its register, then times the scale; the block's maximum per head with vector
//   maxima (softmax_block.h says why that is the same value). Both 2026-12-03, Zen 4,
//   BM_Attention one thread: a 512-token prompt 512-541 -> 390-472 ms, 16 streams at
//   depth 1024 74-88 -> 68-82 ms;
// - exp of 16 scores per instruction, lane by lane the AVX2 Exp8 (same constants and
//   operations);
// - the value rows accumulated into the outputs of up to 4 heads per load of a row, 16
//   floats per FMA, position after position as AVX2 does (each output element's FMA chain
//   in position order), the correction of the earlier blocks multiplied in as AVX2's Scale
//   does it.
// The softmax bookkeeping (running max, std::exp correction, sums in position order) is
// AVX2's, per head; the heads' sums run side by side, not one after another (each a chain
// of dependent adds). A block's positions of one KV head lie together (KvLayout); while
// it works on a block it prefetches the next block's K and V rows of the head into L2, a
// slice before each pair of heads' scores (kv_block.h). Measured with BM_Attention
// streams:16 ctx:1024, one thread, Zen 4, 2026-12-03: the whole next block into L1 filled
// the miss buffers (25% of the cycles waited in the prefetch loop); into L2 in one burst,
// F32 115-136 -> 98-100 ms, F16 101-115 -> 78-84; in slices, 78-84 (F32) and 70-74 (F16).
// An F16 cache (kv_block.h): each block's K and V rows of the KV head are widened into
// scratch first (vcvtph2ps, exact), and the same code runs on the floats.
//
// Compiled for AVX-512 F/BW/VL/DQ in one region after every include (isa_target.h).

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/avx512_attention.h"
#include "kernels/cpu/exp_poly.h"
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/kv_block.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/softmax_block.h"

CASCADE_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2")

namespace cascade::cpu::avx512 {
namespace {

// AVX2's Exp8, 16 lanes at a time (the same operations on every lane).
CASCADE_HOT __m512 Exp16(__m512 x) {
  using namespace exp_poly;
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kMinX)), _mm512_set1_ps(kMaxX));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP[i]));
  const __m512 y =
      _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(y, _mm512_castsi512_ps(e));
}

// exp(s[j] - m) in place for j < count.
void ExpShifted(float* s, int count, float m) {
  const __m512 mv = _mm512_set1_ps(m);
  for (int j = 0; j < count; j += 16) {
    const __mmask16 keep =
        count - j >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (count - j)) - 1);
    _mm512_mask_storeu_ps(s + j, keep, Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(keep, s + j), mv)));
  }
}

// The two 8-lane halves of acc[0..8) (rows 0-7, head a low, head b high), each reduced as
// AVX2's Scores8 reduces its register, times scale, into sa[0..8) and sb[0..8).
CASCADE_HOT void ReduceScores8x2(const __m512 (&acc)[8], float scale, float* sa, float* sb) {
  // Per 256-bit half, AVX2's permute2f128 pairs: rows r and r + 4 side by side, lanes
  // (l0+l4, l1+l5, l2+l6, l3+l7) of each.
  const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
  const __m512i hi = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  __m512 p[4];
  for (int r = 0; r < 4; ++r) {
    p[r] = _mm512_add_ps(_mm512_permutex2var_ps(acc[r], lo, acc[r + 4]),
                         _mm512_permutex2var_ps(acc[r], hi, acc[r + 4]));
  }
  // The shuffles work within 128-bit lanes, hence within each half as AVX2's do.
  const __m512 q01 = _mm512_add_ps(_mm512_shuffle_ps(p[0], p[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(p[0], p[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 q23 = _mm512_add_ps(_mm512_shuffle_ps(p[2], p[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(p[2], p[3], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 sum = _mm512_mul_ps(_mm512_add_ps(_mm512_shuffle_ps(q01, q23, _MM_SHUFFLE(2, 0, 2, 0)),
                                                 _mm512_shuffle_ps(q01, q23, _MM_SHUFFLE(3, 1, 3, 1))),
                                   _mm512_set1_ps(scale));
  _mm256_storeu_ps(sa, _mm512_castps512_ps256(sum));
  _mm256_storeu_ps(sb, _mm512_extractf32x8_ps(sum, 1));
}

// Heads a and b side by side (a in the low, b in the high 256-bit half), 8 elements per
// register: qv[i] holds elements [8i, 8i + 8) of each.
CASCADE_HOT __m512 PairQuery(const float* qa, const float* qb, int64_t e) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(qa + e)),
                            _mm256_loadu_ps(qb + e), 1);
}

// Scores of P pairs of heads' queries (qa[x], qb[x]) against the K rows k + j * stride,
// j < count / 8 * 8, times scale, into sa[x][j] and sb[x][j]: per head and row AVX2's
// Scores8 bit for bit (8 FMA lanes in element order over the n = 8m elements, then the
// same transposed reduction), 8 rows at a time. Each K row's 8 elements are broadcast once
// for the P pairs: with one pair the loop issued a load for every FMA, and Zen 4 has two
// 256-bit loads a cycle for its one 512-bit FMA. With E > 0 (n = 8E) the pairs' queries
// are paired once per call; E = 0 takes any n and pairs them as it goes. A head without a
// partner passes itself as qb and sb = sa: both halves then compute the same bits, and the
// second store rewrites them.
template <int E, int P>
CASCADE_HOT void ScoresRuns8(const float* const* qa, const float* const* qb, const float* k,
                             int64_t stride, int64_t n, int count, float scale, float* const* sa,
                             float* const* sb) {
  __m512 qv[P][E > 0 ? E : 1];
  if constexpr (E > 0) {
    for (int x = 0; x < P; ++x) {
      for (int i = 0; i < E; ++i) qv[x][i] = PairQuery(qa[x], qb[x], 8 * i);
    }
  }
  for (int j = 0; j + 8 <= count; j += 8) {
    const float* kj = k + j * stride;
    __m512 acc[P][8];
    for (int x = 0; x < P; ++x) {
      for (int r = 0; r < 8; ++r) acc[x][r] = _mm512_setzero_ps();
    }
    auto step = [&](const __m512* q, int64_t e) {  // elements [e, e + 8) of the 8 rows
      for (int r = 0; r < 8; ++r) {
        const __m512 kr = _mm512_broadcast_f32x8(_mm256_loadu_ps(kj + r * stride + e));
        for (int x = 0; x < P; ++x) acc[x][r] = _mm512_fmadd_ps(q[x], kr, acc[x][r]);
      }
    };
    if constexpr (E > 0) {
      for (int i = 0; i < E; ++i) {
        __m512 q[P];
        for (int x = 0; x < P; ++x) q[x] = qv[x][i];
        step(q, 8 * i);
      }
    } else {
      for (int64_t e = 0; e < n; e += 8) {
        __m512 q[P];
        for (int x = 0; x < P; ++x) q[x] = PairQuery(qa[x], qb[x], e);
        step(q, e);
      }
    }
    for (int x = 0; x < P; ++x) ReduceScores8x2(acc[x], scale, sa[x] + j, sb[x] + j);
  }
}

// The largest of s[0..count), 16 at a time (for finite scores the order does not change
// it: EnterBlockMax, softmax_block.h).
CASCADE_HOT float BlockMax(const float* s, int count) {
  const __m512 lowest = _mm512_set1_ps(-INFINITY);
  __m512 mx = lowest;
  for (int j = 0; j < count; j += 16) {
    const __mmask16 keep = count - j >= 16 ? static_cast<__mmask16>(0xFFFF)
                                           : static_cast<__mmask16>((1u << (count - j)) - 1);
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(lowest, keep, s + j));
  }
  return _mm512_reduce_max_ps(mx);
}

// For H heads h of one KV group: out_h (n floats) = (rescale_h ? out_h * c_h : out_h) +
// sum over j < count of w_h[j] * v_j (v_j = v + j * stride), every output element's FMAs in
// position order: AVX2's Scale then AccumulateRows per head, bit for bit, with each V row
// loaded once for the H heads.
template <int H>
CASCADE_HOT void AccumulateHeads(const float* const* w, float* const* out, const float* c,
                                 const bool* rescale, const float* v, int64_t stride, int count,
                                 int64_t n) {
  for (int64_t e = 0; e < n; e += 64) {
    const int64_t left = n - e;
    __mmask16 keep[4];
    for (int x = 0; x < 4; ++x) {
      const int64_t m = std::clamp<int64_t>(left - 16 * x, 0, 16);
      keep[x] = static_cast<__mmask16>((1u << m) - 1);
    }
    __m512 o[H][4];
    for (int h = 0; h < H; ++h) {
      for (int x = 0; x < 4; ++x) {
        o[h][x] = _mm512_maskz_loadu_ps(keep[x], out[h] + e + 16 * x);
        if (rescale[h]) o[h][x] = _mm512_mul_ps(_mm512_set1_ps(c[h]), o[h][x]);
      }
    }
    for (int j = 0; j < count; ++j) {
      const float* vj = v + j * stride + e;
      __m512 vx[4];
      for (int x = 0; x < 4; ++x) vx[x] = _mm512_maskz_loadu_ps(keep[x], vj + 16 * x);
      for (int h = 0; h < H; ++h) {
        const __m512 wj = _mm512_set1_ps(w[h][j]);
        for (int x = 0; x < 4; ++x) o[h][x] = _mm512_fmadd_ps(wj, vx[x], o[h][x]);
      }
    }
    for (int h = 0; h < H; ++h) {
      for (int x = 0; x < 4; ++x) _mm512_mask_storeu_ps(out[h] + e + 16 * x, keep[x], o[h][x]);
    }
  }
}

// dst[i] = src[i] (F16) as a float, i < n: exact, as Fp16ToFloat.
void HalfRowToFloat(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t m = std::min<int64_t>(16, n - i);
    const __mmask16 keep = static_cast<__mmask16>((1u << m) - 1);
    _mm512_mask_storeu_ps(dst + i, keep, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(keep, src + i)));
  }
}

// One query's step over one KV block for the group's heads (h0 ..): rows holds the block's
// K and V rows, count of them this query's; m and l are its heads' running maxima and sums;
// next.Issue(*slice) once per pair of heads' scores.
void QueryBlock(const AttentionParams& p, const AttentionQuery& q, int h0, int group,
                const KvRows& rows, int count, float* m, float* l, const NextBlockPrefetch& next,
                int* slice, float* scratch) {
  const KernelTable& avx2 = Avx2Kernels();
  const int64_t hd = p.head_dim;
  const float* k = rows.k;
  const float* v = rows.v;
  const int64_t kv_stride = rows.stride;  // floats between positions
  // Scores: two pairs of heads at a time, then a last pair (or a last odd head, or a group
  // of one, with itself in the other half), 8 positions at a time; positions past the last
  // 8 as AVX2 computes them (the table's dot is AVX2's Dot).
  const int full = count / 8 * 8;
  auto scores = [&]<int P>(int g) {
    const float* qa[P];
    const float* qb[P];
    float* sa[P];
    float* sb[P];
    next.Issue((*slice)++);  // the next block's slices spread out: one per pair of heads
    for (int x = 0; x < P; ++x) {
      const int ga = g + 2 * x;
      const bool pair = ga + 1 < group;
      qa[x] = q.q + (h0 + ga) * hd;
      qb[x] = pair ? qa[x] + hd : qa[x];
      sa[x] = scratch + ga * p.block_size;
      sb[x] = pair ? sa[x] + p.block_size : sa[x];
    }
    if (hd == 64) {
      ScoresRuns8<8, P>(qa, qb, k, kv_stride, hd, count, p.scale, sa, sb);
    } else if (hd == 128) {
      ScoresRuns8<16, P>(qa, qb, k, kv_stride, hd, count, p.scale, sa, sb);
    } else {
      ScoresRuns8<0, P>(qa, qb, k, kv_stride, hd, count, p.scale, sa, sb);
    }
    for (int x = 1; x < P; ++x) next.Issue((*slice)++);
    for (int x = 0; x < P; ++x) {
      for (int j = full; j < count; ++j) {
        sa[x][j] = avx2.dot(qa[x], k + j * kv_stride, hd) * p.scale;
        if (sb[x] != sa[x]) sb[x][j] = avx2.dot(qb[x], k + j * kv_stride, hd) * p.scale;
      }
    }
  };
  int gs = 0;
  for (; gs + 4 <= group; gs += 4) scores.template operator()<2>(gs);
  for (; gs < group; gs += 2) scores.template operator()<1>(gs);
  for (int g = 0; g < group; ++g) SoftCapScores(p.softcap, scratch + g * p.block_size, count);
  // The online softmax per head, AVX2's operations (softmax_block.h): the block's max,
  // the correction of what came before, exp of the shifted scores in place; then the
  // heads' sums.
  float c[kMaxAttentionGroup];
  bool rescale[kMaxAttentionGroup];
  float* out[kMaxAttentionGroup];
  const float* w[kMaxAttentionGroup];
  for (int g = 0; g < group; ++g) {
    float* s = scratch + g * p.block_size;
    ExpShifted(s, count, EnterBlockMax(BlockMax(s, count), &m[g], &l[g], &c[g], &rescale[g]));
    out[g] = q.out + (h0 + g) * hd;
    w[g] = s;
  }
  AddBlockSums(scratch, p.block_size, group, count, l);
  // The value rows into the heads' outputs, up to 4 heads per load of a row.
  int g = 0;
  for (; g + 4 <= group; g += 4) {
    AccumulateHeads<4>(w + g, out + g, c + g, rescale + g, v, kv_stride, count, hd);
  }
  switch (group - g) {
    case 3:
      AccumulateHeads<3>(w + g, out + g, c + g, rescale + g, v, kv_stride, count, hd);
      break;
    case 2:
      AccumulateHeads<2>(w + g, out + g, c + g, rescale + g, v, kv_stride, count, hd);
      break;
    case 1:
      AccumulateHeads<1>(w + g, out + g, c + g, rescale + g, v, kv_stride, count, hd);
      break;
    default:
      break;
  }
}

}  // namespace

void AttentionGroup(const AttentionParams& p, const AttentionQuery* qs, int n, int kvh,
                    float* scratch) {
  const KernelTable& avx2 = Avx2Kernels();
  const int group = p.n_heads / p.n_kv_heads;
  const int64_t hd = p.head_dim;
  if (group > kMaxAttentionGroup || hd % 8 != 0) {  // as AVX2 does it (no model we run has these)
    avx2.attention_group(p, qs, n, kvh, scratch);
    return;
  }
  const int h0 = kvh * group;
  // Block after block of the sequence, each query of the tile in turn on it while it is in
  // L1 (attention_tile.h).
  AttentionTile<&HalfRowToFloat>(
      p, qs, n, kvh, (group + 1) / 2, scratch,
      [&](const AttentionQuery& q, const KvRows& rows, int count, float* m, float* l,
          const NextBlockPrefetch& next,
          int* slice) { QueryBlock(p, q, h0, group, rows, count, m, l, next, slice, scratch); },
      [&](float c, float* x, int64_t len) { avx2.scale(c, x, len); });
}

}  // namespace cascade::cpu::avx512

CASCADE_TARGET_END()
