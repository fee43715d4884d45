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

// How many nearly equal passes take n tokens: one up to kOnePass, else passes of up to kPass.
template <int kOnePass, int kPass>
constexpr int64_t SweepPasses(int64_t n) {
  static_assert(kPass <= kOnePass);
  return n <= kOnePass ? 1 : (n + kPass - 1) / kPass;
}

// Up to this many passes, a sweep takes one group (kGroups 2: one pair) at a time: a pair's
// three passes of up to 6 take a server's 16 streams.
template <int kGroups>
inline constexpr int64_t kFewPasses = kGroups == 2 ? 3 : 2;

// Calls pass.template operator()<T>(g, i) for every group (g: its first row) and every
// pass of T tokens starting at token i (SweepPasses). Each pass sweeps one group when the
// passes are few (decode: each group comes from memory once and the later passes find it
// in L1/L2), 8 groups when they are many (prefill: a pass's tokens stay in L1 while groups
// of at most ~0.8 MiB go by).
//
// kGroups == 2: the pass takes two adjacent groups at once, pass.template operator()<T>(g,
// i, groups) with groups 2 (rows g .. g + 31), or 1 for the last group of a range holding an
// odd number; the sweep's order is the same, a pair where there was a group.
template <int kOnePass, int kPass, int kGroups = 1, class F>
inline void SweepGroups(const MatmulTask& t, F&& pass) {
  static_assert(kGroups == 1 || kGroups == 2);
  const int64_t passes = SweepPasses<kOnePass, kPass>(t.n);
  const int64_t width = (t.n + passes - 1) / passes;
  const int64_t sweep = passes <= kFewPasses<kGroups> ? kGroups * kRowGroup : 8 * kRowGroup;
  for (int64_t r = t.r0; r < t.r1; r += sweep) {
    const int64_t end = std::min(r + sweep, t.r1);
    for (int64_t i = 0; i < t.n; i += width) {
      WithWidth<kOnePass>(std::min(width, t.n - i), [&]<int T>() {
        for (int64_t g = r; g < end; g += kGroups * kRowGroup) {
          if constexpr (kGroups == 1) {
            pass.template operator()<T>(g, i);
          } else {
            pass.template operator()<T>(g, i, std::min<int64_t>(kGroups, (end - g) / kRowGroup));
          }
        }
      });
    }
  }
}

}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_GROUPED_SWEEP_H_
