// Internal: the online softmax's bookkeeping per KV block that the AVX2 and AVX-512
// attention kernels share (kernels_avx2_attention.cc, kernels_avx512_attention.cc), whose
// contract is to give the same bits: one copy of the rule, so the two cannot drift. The
// scalar kernel takes the soft-cap rule from here too.
//
// Plain scalar code with internal linkage: each kernel file compiles its own copy with its
// own flags, so no copy built for AVX-512 can stand in for the AVX2 one at link time.
// No allocation, no shared state.
#ifndef CASCADE_KERNELS_CPU_SOFTMAX_BLOCK_H_
#define CASCADE_KERNELS_CPU_SOFTMAX_BLOCK_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace cascade::cpu {
namespace {

// A head enters a block whose scores' maximum is bmax: its running max *m becomes
// max(*m, bmax), which is returned; *c = exp(m_old - m_new) corrects what came before,
// *rescale says whether there is anything before (the output still all zeros otherwise),
// and the running sum *l is corrected (*l *= *c). For finite scores the block's maximum
// is the same value in any order of comparison (a -0 / +0 tie changes no exp below), so
// each kernel finds it with its own vector instructions.
inline float EnterBlockMax(float bmax, float* m, float* l, float* c, bool* rescale) {
  const float m_new = std::max(*m, bmax);
  *c = std::exp(*m - m_new);
  *rescale = *l > 0;
  *l *= *c;
  *m = m_new;
  return m_new;
}

// Soft-capped scores (AttentionParams::softcap > 0): s[j] = cap * tanh(s[j] / cap) for
// j < count, in place, with libm's tanh (the same bits in every kernel file); cap <= 0:
// nothing.
inline void SoftCapScores(float cap, float* s, int count) {
  if (cap <= 0) return;
  for (int j = 0; j < count; ++j) s[j] = cap * std::tanh(s[j] / cap);
}

// l[h] += w_h[0] + w_h[1] + ... + w_h[count - 1] (w_h = w + h * stride, the block's
// weights of head h), in position order for each head, four heads' chains side by side in
// registers (one head's sum is a chain of dependent adds; through memory each would also
// wait on the store before it).
inline void AddBlockSums(const float* w, int64_t stride, int heads, int count, float* l) {
  int h = 0;
  for (; h + 4 <= heads; h += 4) {
    const float* w0 = w + h * stride;
    const float* w1 = w0 + stride;
    const float* w2 = w1 + stride;
    const float* w3 = w2 + stride;
    float a0 = l[h], a1 = l[h + 1], a2 = l[h + 2], a3 = l[h + 3];
    for (int j = 0; j < count; ++j) {
      a0 += w0[j];
      a1 += w1[j];
      a2 += w2[j];
      a3 += w3[j];
    }
    l[h] = a0;
    l[h + 1] = a1;
    l[h + 2] = a2;
    l[h + 3] = a3;
  }
  for (; h < heads; ++h) {
    const float* wh = w + h * stride;
    float a = l[h];
    for (int j = 0; j < count; ++j) a += wh[j];
    l[h] = a;
  }
}

}  // namespace
}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_SOFTMAX_BLOCK_H_
