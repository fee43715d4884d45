// Internal: the AVX-512 VNNI matmul of Q8_0 / Q4_0 / Q4_K weights grouped 16 rows at a time
// (row_groups.h) x Q8_0 (Q4_K: Q8_K) activations, for any number of tokens
// (kernels_avx512_grouped.cc).
//
// Each output is bit for bit what the AVX2 kernels give for the same weight in the file's
// layout: per 32-element block the exact integer sum S (here: 8 vpdpbusd, each adding 4
// elements of one row in that row's own 32-bit lane, from -8 sum(x) or -128 sum(x)), then
// y = fma(S, d_w * d_x, y) block after block (Q4_K: per super-block the exact S and min
// term M, then y = fma(S, d_w * d_x, y), y = fma(-M, dmin_w * d_x, y)). The tokens are
// taken in register passes of a few tokens over one group or two (Q4_0 / Q8_0); each
// token's sums are its own, so neither the passes, the groups a pass takes, the row range
// nor the thread changes a bit (the batch-invariance contract of kernel_table.h).
//
// Contract: call only where the CPU has AVX-512 F/BW/VL/DQ and VNNI (with AVX2, FMA, F16C).
// GroupedMatmulFor(prefetch_q4k): the matmul, its Q4_K passes prefetching ahead or not
// (the same bits either way; the table takes PrefetchGroupedQ4K's choice, tests run both):
// t.w the grouped weight (t.w_stride its row_bytes), t.x the n rows that
// PrepareGroupedTokens (grouped_token.h) prepared (k % 32 == 0; Q4_K: k % 256 == 0), t.r0
// and t.r1 multiples of 16. Thread-safe: writes only rows [t.r0, t.r1) of y; never
// allocates; uses no scratch.
#ifndef CASCADE_KERNELS_CPU_AVX512_GROUPED_H_
#define CASCADE_KERNELS_CPU_AVX512_GROUPED_H_

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/kernel_table.h"
#include "tensor/tensor_type.h"

namespace cascade::cpu::avx512 {

bool GroupsType(TensorType type);  // Q8_0, Q4_0 and Q4_K
GroupedMatmulFn GroupedMatmulFor(bool prefetch_q4k);

}  // namespace cascade::cpu::avx512

#endif  // CASCADE_KERNELS_CPU_AVX512_GROUPED_H_
