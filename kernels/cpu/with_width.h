// WithWidth: turns a run-time width into a compile-time one, for kernels whose register
// tiles are templates on how many tokens they hold. Header-only; no intrinsics, so it is
// baseline code wherever it is included. Thread-safe (stateless).
#ifndef CASCADE_KERNELS_CPU_WITH_WIDTH_H_
#define CASCADE_KERNELS_CPU_WITH_WIDTH_H_

#include <cstdint>

namespace cascade::cpu {

// Calls f.template operator()<T>() with T = width, for 1 <= width <= kMax; nothing for a
// width outside that range.
template <int kMax, class F>
inline void WithWidth(int64_t width, F&& f) {
  if constexpr (kMax >= 1) {
    if (width == kMax) {
      f.template operator()<kMax>();
    } else {
      WithWidth<kMax - 1>(width, f);
    }
  }
}

}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_WITH_WIDTH_H_
