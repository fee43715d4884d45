// Internal: software prefetch of a byte range, for every kernel file whatever its ISA flags
// (baseline code: __builtin_prefetch, no intrinsics). A prefetch never faults, even past
// the end of a mapping, and changes no result: only where the bytes wait.
//
// Where each kernel prefetches, and the measurements that chose it, is written beside the
// call (grouped_sweep.h, kernel_table.h, kernels_avx512_decode.cc,
// kernels_avx512_attention.cc, kernels_avx2.cc, kernels_avx2_quant.cc, kernels_avx2_kquant.cc).
#ifndef CASCADE_KERNELS_CPU_PREFETCH_H_
#define CASCADE_KERNELS_CPU_PREFETCH_H_

#include <cstddef>

namespace cascade::cpu {

// The cache a prefetch fills: L1 (and the levels below) for bytes read within the next few
// hundred cycles, L2 for bytes a later group of rows reads (into L1 they would evict the
// rows being read now).
enum class CacheLevel { kL1, kL2 };

// Requests the cache lines of [p, p + bytes), one per 64 bytes.
template <CacheLevel kLevel = CacheLevel::kL1>
inline void PrefetchBytes(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes; off += 64) {
    __builtin_prefetch(c + off, 0, kLevel == CacheLevel::kL1 ? 3 : 2);
    // A loop of prefetches alone has no effect the compiler must keep: where it can prove
    // the loop ends (bytes bounded by what it knows), GCC deletes it whole. The empty asm
    // statement, which takes the address, keeps it.
    asm volatile("" : : "r"(c + off));
  }
}

}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_PREFETCH_H_
