// Internal: how the grouped matmul kernels (avx2_grouped.h, avx512_grouped.h) walk a matmul:
// the 16-row groups of rows [t.r0, t.r1) against the t.n tokens, in register passes of a
// few tokens. Header-only and baseline code (no intrinsics); stateless, thread-safe.
#ifndef CASCADE_KERNELS_CPU_GROUPED_SWEEP_H_
#define CASCADE_KERNELS_CPU_GROUPED_SWEEP_H_

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/row_groups.h"
#include "kernels/cpu/with_width.h"

namespace cascade::cpu {

// Calls pass.template operator()<T>(g, i) for every group (g: its first row) and every
// pass of T tokens starting at token i. Up to kOnePass tokens run as one pass; more run in
// nearly equal passes of up to kPass (kPass <= kOnePass). Each pass sweeps one group when
// the passes are few (decode: each group comes from memory once and the later passes find
// it in L1/L2), 8 groups when they are many (prefill: a pass's tokens stay in L1 while
// groups of at most ~0.8 MiB go by).
template <int kOnePass, int kPass, class F>
inline void SweepGroups(const MatmulTask& t, F&& pass) {
  static_assert(kPass <= kOnePass);
  const int64_t most = t.n <= kOnePass ? kOnePass : kPass;
  const int64_t passes = (t.n + most - 1) / most;
  const int64_t width = (t.n + passes - 1) / passes;
  const int64_t sweep = passes <= 2 ? kRowGroup : 8 * kRowGroup;
  for (int64_t r = t.r0; r < t.r1; r += sweep) {
    const int64_t end = std::min(r + sweep, t.r1);
    for (int64_t i = 0; i < t.n; i += width) {
      WithWidth<kOnePass>(std::min(width, t.n - i), [&]<int T>() {
        for (int64_t g = r; g < end; g += kRowGroup) pass.template operator()<T>(g, i);
      });
    }
  }
}

}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_GROUPED_SWEEP_H_
