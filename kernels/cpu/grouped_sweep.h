// Internal: how the grouped matmul kernels (avx2_grouped.h, avx512_grouped.h) walk a matmul:
// the 16-row groups of rows [t.r0, t.r1) against the t.n tokens, in register passes of a
// few tokens. Header-only and baseline code (no intrinsics); stateless, thread-safe.
#ifndef CASCADE_KERNELS_CPU_GROUPED_SWEEP_H_
#define CASCADE_KERNELS_CPU_GROUPED_SWEEP_H_

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/row_groups.h"
#include "kernels/cpu/with_width.h"

namespace cascade::cpu {

// The Q4_K grouped kernels, reading super-block b of a group (`block`, block_bytes long), where
// PrefetchGroupedQ4K (kernel_table.h) has them (every core but Zen 4), prefetch the bytes
// kGroupedPrefetchBytes further on (four super-blocks of 16 rows) into L1: the rest of the group,
// then the next (groups lie back to back). Without it the hardware prefetcher fell behind on Zen 5:
// TinyLlama Q4_K decode on one thread, 2 rounds, AVX-512 table 27.0-28.1 -> 45.0-45.3 tokens/s,
// AVX2 table 15.7-17.0 -> 30.4-31.8 (kernel_bench BM_DecodeLayers Q4_K, AVX2: 8.7-10.5 -> 18.2-22.8
// GiB/s; 4 KiB ahead 21.4-22.7, 16 KiB 15.9-22.1). The Q4_0 / Q8_0 kernels prefetch only in passes
// of many tokens (AVX-512: 8 or more, AVX2: 4), where each block's arithmetic is long enough for
// the hardware prefetcher to fall behind too: a 16-token decode step of TinyLlama's layers (a
// server's 16 streams; BM_DecodeLayers tokens:16, Zen 5) Q4_0 AVX-512 246 -> 470-480 GFLOP/s on one
// thread, 470 -> 700-730 on two, Q8_0 311 -> 340-418, 490-550 -> 660-700; AVX2 Q4_0 118 -> 166-171
// on one thread. Their one-token passes (at the memory's rate already) were 0-5% slower with it,
// and do without.
inline constexpr int64_t kGroupedPrefetchBytes = 9216;
inline void PrefetchAhead(const uint8_t* block, size_t block_bytes) {
  PrefetchBytes(block + kGroupedPrefetchBytes, block_bytes);
}

// One pass over two adjacent groups, as SweepGroups<..., 2> hands it over.
struct PairStep {
  int64_t g = 0;       // the first group's first row
  int64_t i = 0;       // the pass's first token
  int groups = 2;      // 2 (rows g .. g + 31), or 1 for the last group of an odd range
  bool first = false;  // the sweep's first pass over these rows: it reads them from memory
  // The sweep takes one pair at a time in next_parts > 1 passes (0: it does not), this one
  // the next_part-th: its share of bringing the next pair into L2 while the passes over
  // this one find it in L1/L2 (the passes share it out evenly, see PairPass).
  int next_part = 0, next_parts = 0;
};

// Calls pass.template operator()<T>(g, i) for every group (g: its first row) and every
// pass of T tokens starting at token i. Up to kOnePass tokens run as one pass; more run in
// nearly equal passes of up to kPass (kPass <= kOnePass). Each pass sweeps one group when
// the passes are few (decode: each group comes from memory once and the later passes find
// it in L1/L2), 8 groups when they are many (prefill: a pass's tokens stay in L1 while
// groups of at most ~0.8 MiB go by).
//
// kGroups == 2: the pass takes two adjacent groups at once, pass.template
// operator()<T>(PairStep); the sweep's order is the same, a pair where there was a group,
// and up to three passes count as few (a pair's three passes of up to 6 take a server's 16
// streams).
template <int kOnePass, int kPass, int kGroups = 1, class F>
inline void SweepGroups(const MatmulTask& t, F&& pass) {
  static_assert(kPass <= kOnePass);
  static_assert(kGroups == 1 || kGroups == 2);
  const int64_t most = t.n <= kOnePass ? kOnePass : kPass;
  const int64_t passes = (t.n + most - 1) / most;
  const int64_t width = (t.n + passes - 1) / passes;
  const bool few = passes <= (kGroups == 2 ? 3 : 2);
  const int64_t sweep = few ? kGroups * kRowGroup : 8 * kRowGroup;
  for (int64_t r = t.r0; r < t.r1; r += sweep) {
    const int64_t end = std::min(r + sweep, t.r1);
    for (int64_t i = 0; i < t.n; i += width) {
      WithWidth<kOnePass>(std::min(width, t.n - i), [&]<int T>() {
        for (int64_t g = r; g < end; g += kGroups * kRowGroup) {
          if constexpr (kGroups == 1) {
            pass.template operator()<T>(g, i);
          } else {
            pass.template operator()<T>(PairStep{
                .g = g,
                .i = i,
                .groups = static_cast<int>(std::min<int64_t>(kGroups, (end - g) / kRowGroup)),
                .first = i == 0,
                .next_part = static_cast<int>(i / width),
                .next_parts = few && passes > 1 ? static_cast<int>(passes) : 0});
          }
        }
      });
    }
  }
}

}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_GROUPED_SWEEP_H_
