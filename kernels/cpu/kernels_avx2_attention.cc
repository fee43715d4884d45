// AVX2 attention over the paged KV cache (online softmax, a GQA group's heads per call),
// SiLU-mul and GELU(tanh)-mul, with a vectorized exp. Compiled with CASCADE_AVX2_FLAGS.
//
// Order: a head's scores are canonical 8-lane dot products (as the table's dot) times the
// scale, soft-capped when asked (softmax_block.h); per KV block, the running max, the
// correction exp(m_old - m_new) (std::exp) and the weights exp(s - m_new) (Exp8 below,
// within 2 ulp of expf) are applied in position order, with the output accumulated by FMA
// per position. Nothing depends on other
// queries, heads or threads, so results are batch-invariant. Per block the heads go
// through each phase together (scores, then weights, then sums, then outputs) so that
// their dependency chains overlap, and two heads share each load of a V row.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention_tile.h"
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/exp_poly.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/kv_block.h"
#include "kernels/cpu/softmax_block.h"
#include "util/fp16.h"

namespace cascade::cpu::avx2 {
namespace {

// exp(x) for x in [-87.3, 88.7] (clamped outside), exp_poly.h's method.
inline __m256 Exp8(__m256 x) {
  using namespace exp_poly;
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kMinX)), _mm256_set1_ps(kMaxX));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP[i]));
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// out += sum over j < count of w[j] * v_j (v_j = v + j * stride), one position at a time.
inline void AccumulateRows(const float* w, const float* v, int64_t stride, int count, float* out,
                           int64_t n) {
  int64_t e = 0;
  for (; e + 32 <= n; e += 32) {  // 4 registers of the output stay in flight
    __m256 o0 = _mm256_loadu_ps(out + e), o1 = _mm256_loadu_ps(out + e + 8);
    __m256 o2 = _mm256_loadu_ps(out + e + 16), o3 = _mm256_loadu_ps(out + e + 24);
    for (int j = 0; j < count; ++j) {
      const float* vj = v + j * stride + e;
      const __m256 wj = _mm256_set1_ps(w[j]);
      o0 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(vj), o0);
      o1 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(vj + 8), o1);
      o2 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(vj + 16), o2);
      o3 = _mm256_fmadd_ps(wj, _mm256_loadu_ps(vj + 24), o3);
    }
    _mm256_storeu_ps(out + e, o0);
    _mm256_storeu_ps(out + e + 8, o1);
    _mm256_storeu_ps(out + e + 16, o2);
    _mm256_storeu_ps(out + e + 24, o3);
  }
  for (; e + 8 <= n; e += 8) {
    __m256 o = _mm256_loadu_ps(out + e);
    for (int j = 0; j < count; ++j) {
      o = _mm256_fmadd_ps(_mm256_set1_ps(w[j]), _mm256_loadu_ps(v + j * stride + e), o);
    }
    _mm256_storeu_ps(out + e, o);
  }
  for (; e < n; ++e) {
    float o = out[e];
    for (int j = 0; j < count; ++j) o = std::fma(w[j], v[j * stride + e], o);
    out[e] = o;
  }
}

// Two heads a and b of a group, head_dim n a multiple of 32: out_h = (rescale_h ? out_h *
// c_h : out_h) + sum over j < count of w_h[j] * v_j, per head exactly Scale then
// AccumulateRows (each output element's FMAs in position order), each V row loaded once
// for both.
inline void AccumulateTwoHeads(const float* wa, const float* wb, float ca, float cb, bool rescale_a,
                               bool rescale_b, const float* v, int64_t stride, int count,
                               float* outa, float* outb, int64_t n) {
  for (int64_t e = 0; e < n; e += 32) {
    __m256 a[4], b[4];
    for (int x = 0; x < 4; ++x) {
      a[x] = _mm256_loadu_ps(outa + e + 8 * x);
      b[x] = _mm256_loadu_ps(outb + e + 8 * x);
      if (rescale_a) a[x] = _mm256_mul_ps(_mm256_set1_ps(ca), a[x]);
      if (rescale_b) b[x] = _mm256_mul_ps(_mm256_set1_ps(cb), b[x]);
    }
    for (int j = 0; j < count; ++j) {
      const float* vj = v + j * stride + e;
      const __m256 wja = _mm256_set1_ps(wa[j]), wjb = _mm256_set1_ps(wb[j]);
      for (int x = 0; x < 4; ++x) {
        const __m256 vx = _mm256_loadu_ps(vj + 8 * x);
        a[x] = _mm256_fmadd_ps(wja, vx, a[x]);
        b[x] = _mm256_fmadd_ps(wjb, vx, b[x]);
      }
    }
    for (int x = 0; x < 4; ++x) {
      _mm256_storeu_ps(outa + e + 8 * x, a[x]);
      _mm256_storeu_ps(outb + e + 8 * x, b[x]);
    }
  }
}

// Scores of 8 K rows (k + r * stride, r < 8) against q, times `scale`, into s[0..8): each
// row's dot product bit for bit as Dot() gives it (8 FMA lanes in element order, then
// ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7))), with the 8 lane reductions done together by
// transposing the accumulators instead of 8 horizontal sums.
inline void Scores8(const float* q, const float* k, int64_t stride, int64_t n, float scale,
                    float* s) {
  __m256 acc[8];
  for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
  int64_t e = 0;
  for (; e + 8 <= n; e += 8) {
    const __m256 qv = _mm256_loadu_ps(q + e);
    for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + r * stride + e), acc[r]);
  }
  if (e < n) {
    const __m256i m = TailMask(n - e);
    const __m256 qv = _mm256_maskload_ps(q + e, m);
    for (int r = 0; r < 8; ++r) {
      acc[r] = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k + r * stride + e, m), acc[r]);
    }
  }
  // Rows r and r + 4 side by side: lanes (l0+l4, l1+l5, l2+l6, l3+l7) of each.
  __m256 p[4];
  for (int r = 0; r < 4; ++r) {
    p[r] = _mm256_add_ps(_mm256_permute2f128_ps(acc[r], acc[r + 4], 0x20),
                         _mm256_permute2f128_ps(acc[r], acc[r + 4], 0x31));
  }
  // (l0+l4)+(l2+l6) and (l1+l5)+(l3+l7) of two rows per half.
  const __m256 q01 = _mm256_add_ps(_mm256_shuffle_ps(p[0], p[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(p[0], p[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 q23 = _mm256_add_ps(_mm256_shuffle_ps(p[2], p[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(p[2], p[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // Their sum: rows 0-3 in the low half, 4-7 in the high half.
  const __m256 sum = _mm256_add_ps(_mm256_shuffle_ps(q01, q23, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(q01, q23, _MM_SHUFFLE(3, 1, 3, 1)));
  _mm256_storeu_ps(s, _mm256_mul_ps(sum, _mm256_set1_ps(scale)));
}

// dst[i] = src[i] (F16) as a float, i < n: F16C, exact as Fp16ToFloat.
void HalfRowToFloat(const uint16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
  for (; i < n; ++i) dst[i] = Fp16ToFloat(src[i]);
}

}  // namespace

// out[i] = x[i] as F16, i < n: F16C rounding to nearest even, which gives FloatToFp16's
// bits for every input, NaNs (quieted, payload truncated) included.
void FloatRowToHalf(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = FloatToFp16(x[i]);
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, Exp8(_mm256_xor_ps(g, sign))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    alignas(32) float g[8] = {}, u[8] = {}, o[8];
    std::copy(gate + i, gate + n, g);
    std::copy(up + i, up + n, u);
    SiluMul(g, u, 8, o);
    std::copy(o, o + (n - i), out + i);
  }
}

void GeluMul(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f), a = _mm256_set1_ps(kGeluA), b = _mm256_set1_ps(kGeluB);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 minus_2u = _mm256_mul_ps(g, _mm256_fmadd_ps(b, _mm256_mul_ps(g, g), a));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, Exp8(minus_2u)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    alignas(32) float g[8] = {}, u[8] = {}, o[8];
    std::copy(gate + i, gate + n, g);
    std::copy(up + i, up + n, u);
    GeluMul(g, u, 8, o);
    std::copy(o, o + (n - i), out + i);
  }
}

namespace {

// The largest of s[0..count), 8 at a time instead of a chain of count dependent maxima
// (for finite scores the order does not change it: EnterBlockMax, softmax_block.h).
float BlockMax(const float* s, int count) {
  const __m256 lowest = _mm256_set1_ps(-INFINITY);
  __m256 mx = lowest;
  int j = 0;
  for (; j + 8 <= count; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j));
  if (j < count) {
    const __m256i mask = TailMask(count - j);
    mx = _mm256_max_ps(
        mx, _mm256_blendv_ps(lowest, _mm256_maskload_ps(s + j, mask), _mm256_castsi256_ps(mask)));
  }
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// One query's step over one KV block for the group's heads (h0 ..): rows holds the block's
// K and V rows, count of them this query's; m and l are its heads' running maxima and sums;
// next.Issue(*slice) before each head's scores.
void QueryBlock(const AttentionParams& p, const AttentionQuery& q, int h0, int group,
                const KvRows& rows, int count, float* m, float* l, const NextBlockPrefetch& next,
                int* slice, float* scratch) {
  const int64_t hd = p.head_dim;
  const float* k = rows.k;
  const float* v = rows.v;
  const int64_t kv_stride = rows.stride;  // floats between positions
  // Scores of every head of the group, 8 positions at a time (the block's K rows stay in
  // L1 for the group's heads).
  for (int g = 0; g < group; ++g) {
    next.Issue((*slice)++);
    const float* qg = q.q + (h0 + g) * hd;
    float* sg = scratch + g * p.block_size;
    int j = 0;
    for (; j + 8 <= count; j += 8) Scores8(qg, k + j * kv_stride, kv_stride, hd, p.scale, sg + j);
    for (; j < count; ++j) sg[j] = Dot(qg, k + j * kv_stride, hd) * p.scale;
    SoftCapScores(p.softcap, sg, count);
  }
  // Per head: the block's max, the correction of what came before, the weights
  // exp(s - m_new) in place (softmax_block.h); then the heads' sums.
  float c[kMaxAttentionGroup];
  bool rescale[kMaxAttentionGroup];
  for (int g = 0; g < group; ++g) {
    float* s = scratch + g * p.block_size;
    const __m256 mv =
        _mm256_set1_ps(EnterBlockMax(BlockMax(s, count), &m[g], &l[g], &c[g], &rescale[g]));
    int j = 0;
    for (; j + 8 <= count; j += 8) {
      _mm256_storeu_ps(s + j, Exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv)));
    }
    if (j < count) {
      const __m256i mask = TailMask(count - j);
      _mm256_maskstore_ps(s + j, mask, Exp8(_mm256_sub_ps(_mm256_maskload_ps(s + j, mask), mv)));
    }
  }
  AddBlockSums(scratch, p.block_size, group, count, l);
  // The value rows into the outputs: two heads per load of a row where head_dim is a
  // multiple of 32, else one head at a time.
  int g = 0;
  if (hd % 32 == 0) {
    for (; g + 2 <= group; g += 2) {
      AccumulateTwoHeads(scratch + g * p.block_size, scratch + (g + 1) * p.block_size, c[g],
                         c[g + 1], rescale[g], rescale[g + 1], v, kv_stride, count,
                         q.out + (h0 + g) * hd, q.out + (h0 + g + 1) * hd, hd);
    }
  }
  for (; g < group; ++g) {
    float* out = q.out + (h0 + g) * hd;
    if (rescale[g]) Scale(c[g], out, hd);
    AccumulateRows(scratch + g * p.block_size, v, kv_stride, count, out, hd);
  }
}

}  // namespace

void AttentionGroup(const AttentionParams& p, const AttentionQuery* qs, int n, int kvh,
                    float* scratch) {
  const int group = p.n_heads / p.n_kv_heads;
  if (group > kMaxAttentionGroup) {  // no model we run has such groups; stay correct anyway
    ScalarKernels().attention_group(p, qs, n, kvh, scratch);
    return;
  }
  const int h0 = kvh * group;
  // Block after block of the sequence, each query of the tile in turn on it while it is in
  // L1 (attention_tile.h).
  AttentionTile<&HalfRowToFloat>(
      p, qs, n, kvh, group, scratch,
      [&](const AttentionQuery& q, const KvRows& rows, int count, float* m, float* l,
          const NextBlockPrefetch& next, int* slice) {
        QueryBlock(p, q, h0, group, rows, count, m, l, next, slice, scratch);
      },
      [&](float c, float* x, int64_t len) { Scale(c, x, len); });
}

}  // namespace cascade::cpu::avx2
