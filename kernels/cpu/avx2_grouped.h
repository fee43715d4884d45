// Internal: the AVX2 matmul of Q4_0 and Q4_K weights grouped 16 rows at a time
// (row_groups.h) x Q8_0 (Q4_K: Q8_K) activations, for any number of tokens
// (kernels_avx2_grouped.cc): what a CPU without AVX-512 VNNI (Zen 3) runs for those types,
// their weights grouped at load.
//
// Each output is bit for bit what the AVX2 file-layout kernels (kernels_avx2_quant.cc,
// kernels_avx2_kquant.cc) give: per 32-element block the exact integer sum S, then
// y = fma(S, d_w * d_x, y) block after block (Q4_K: per super-block the exact S and min
// term M, then y = fma(S, d_w * d_x, y), y = fma(-M, dmin_w * d_x, y)). Here S comes
// without a horizontal reduction: a 32-byte half of a 64-byte chunk holds 4 codes of each
// of 8 rows in that row's 32-bit lane, so vpmaddubsw against the token's 4 matching codes
// (broadcast) leaves that row's pair sums in its own lane; a block's (Q4_K: a sub-block's)
// add up in int16 (|sum| <= 8 * 2 * 15 * 127 = 30480) and one vpmaddwd widens them (Q4_K:
// by the rows' 6-bit scales). Against the file's layout this drops the per-block shuffle
// tree over 4 rows and the scale gather, about half the instructions per weight byte,
// which bound decode there.
//
// Contract: call only where the CPU has AVX2, FMA and F16C. GroupsType(type): whether this
// kernel takes weights of `type` (Q4_0 and Q4_K; Q8_0's file-layout kernel, already near
// the memory's rate at decode, was faster). GroupedMatmulFor as in avx512_grouped.h, on the
// activations grouped_token.h prepares: t.r0 and t.r1 multiples of 16; writes only rows
// [t.r0, t.r1) of y; thread-safe; no allocation, no scratch.
#ifndef CASCADE_KERNELS_CPU_AVX2_GROUPED_H_
#define CASCADE_KERNELS_CPU_AVX2_GROUPED_H_

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/kernel_table.h"
#include "tensor/tensor_type.h"

namespace cascade::cpu::avx2 {

bool GroupsType(TensorType type);
GroupedMatmulFn GroupedMatmulFor(bool prefetch_q4k);

}  // namespace cascade::cpu::avx2

#endif  // CASCADE_KERNELS_CPU_AVX2_GROUPED_H_
