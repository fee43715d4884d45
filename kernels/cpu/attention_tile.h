// Internal: the walk of a tile of queries of one sequence over its KV blocks that the AVX2
// and AVX-512 attention kernels share (KernelTable::attention_group): one copy of the
// order, so the two cannot drift.
//
// AttentionTile zeroes the group's heads' outputs of qs[0..n) (n <= kAttentionTile), then
// walks the longest query's blocks in order from the block of the earliest first position
// (AttentionParams::first_position: a sliding window skips the blocks before it); per block
// it widens an F16 block once (KvBlockRows with ToFloat) and calls, for each query whose
// positions [first, n_ctx) meet the block,
//   step(q, rows, count, m, l, next, &slice)
// with rows starting at the query's first position in the block, count its positions
// there, m and l its heads' running maxima and sums, and `next` prefetching the next block
// in slices_per_query slices per such query (Issue(slice++) before each slice's work); at
// the end each head's output is scaled by 1 / l with scale(c, x, n) (x *= c). Each query's
// operations are those it gets alone (n = 1).
//
// Header-only with internal linkage: each kernel file compiles its own copy with its own
// flags. No allocation: the per-query state (kAttentionTile x 64 heads) is on the stack.
#ifndef CASCADE_KERNELS_CPU_ATTENTION_TILE_H_
#define CASCADE_KERNELS_CPU_ATTENTION_TILE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/kv_block.h"

namespace cascade::cpu {
namespace {

// The largest GQA group the SIMD kernels take (larger ones go to the scalar kernel).
constexpr int kMaxAttentionGroup = 64;

template <void (*ToFloat)(const uint16_t*, int64_t, float*), class Step, class ScaleFn>
void AttentionTile(const AttentionParams& p, const AttentionQuery* qs, int n, int kvh,
                   int slices_per_query, float* scratch, Step step, ScaleFn scale) {
  const int group = p.n_heads / p.n_kv_heads;
  const int64_t hd = p.head_dim;
  const int h0 = kvh * group;
  float m[kAttentionTile][kMaxAttentionGroup], l[kAttentionTile][kMaxAttentionGroup];
  int longest = 0;
  int32_t first = qs[0].n_ctx;
  for (int t = 0; t < n; ++t) {
    first = std::min(first, p.first_position(qs[t]));
    for (int g = 0; g < group; ++g) {
      m[t][g] = -INFINITY;
      l[t][g] = 0.0f;
      std::fill(qs[t].out + (h0 + g) * hd, qs[t].out + (h0 + g + 1) * hd, 0.0f);
    }
    if (qs[t].n_ctx > qs[longest].n_ctx) longest = t;
  }
  const AttentionQuery& last = qs[longest];
  // Whether query q's positions [first_position, n_ctx) meet the block at `start`.
  auto meets = [&p](const AttentionQuery& q, int32_t start) {
    return q.n_ctx > start && p.first_position(q) < start + p.block_size;
  };
  for (int32_t start = first / p.block_size * p.block_size; start < last.n_ctx;
       start += p.block_size) {
    const int32_t block = last.blocks[start / p.block_size];
    int active = 0;
    for (int t = 0; t < n; ++t) active += meets(qs[t], start) ? 1 : 0;
    if (active == 0) continue;
    const NextBlockPrefetch next(p, last, start, kvh, active * slices_per_query);
    const KvRows rows = KvBlockRows<ToFloat>(
        p, block, kvh, std::min(p.block_size, last.n_ctx - start), scratch + group * p.block_size);
    int slice = 0;
    for (int t = 0; t < n; ++t) {
      if (!meets(qs[t], start)) continue;
      const int lo = std::max(0, p.first_position(qs[t]) - start);
      const KvRows from{rows.k + lo * rows.stride, rows.v + lo * rows.stride, rows.stride};
      step(qs[t], from, std::min(p.block_size, qs[t].n_ctx - start) - lo, m[t], l[t], next, &slice);
    }
  }
  for (int t = 0; t < n; ++t) {
    for (int g = 0; g < group; ++g) {
      if (l[t][g] > 0) scale(1.0f / l[t][g], qs[t].out + (h0 + g) * hd, hd);
    }
  }
}

}  // namespace
}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_ATTENTION_TILE_H_
