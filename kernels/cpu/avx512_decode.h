// Internal: the AVX-512 VNNI decode kernels (kernels_avx512_decode.cc): quantized weights
// times quantized activations for a few tokens (decode and micro-batches), streaming the
// weight rows in place, once per call, 16 rows at a time.
//
// Each kernel gives bit for bit the AVX2 kernel's results for the same task (the order of
// kernel_table.h: per block or super-block, the exact integer sums, then the same float
// steps in the same order), so the AVX-512 table stays batch invariant across decode,
// micro-batches and prefill. The 16 rows of a group sit in the 16 float lanes of one
// register for the float steps, so every step is one instruction for 16 outputs.
//
// Contract: call only when the CPU has AVX-512 F/BW/VL/DQ and VNNI (with AVX2, FMA and
// F16C), with t.n in [1, kQuantDecodeMaxTokens] (Q8_0 / Q4_0 weights, BlockQ8_0 activation
// rows) or [1, kKQuantDecodeMaxTokens] (Q4_K / Q5_K / Q6_K weights, BlockQ8K rows); t.k a
// multiple of the block. t.scratch holds ScratchFloats(t.k) floats. A range of fewer than
// 16 rows that ends below row 16 is handed to the AVX2 kernel (same bits); otherwise a
// range's last, partial group re-reads up to 15 rows below it (never writing them).
// Thread-safe: writes only rows [t.r0, t.r1) of y and t.scratch; never allocates.
#ifndef CASCADE_KERNELS_CPU_AVX512_DECODE_H_
#define CASCADE_KERNELS_CPU_AVX512_DECODE_H_

#include <cstdint>

#include "kernels/cpu/kernel_table.h"
#include "tensor/tensor_type.h"

namespace cascade::cpu::avx512 {

// Most tokens the decode kernels take (more go to the blocked 16-lane panels).
inline constexpr int64_t kQuantDecodeMaxTokens = 7;
inline constexpr int64_t kKQuantDecodeMaxTokens = 15;

// Q8_0 / Q4_0 weights (`type`) x Q8_0 activations.
void QuantDecode(const MatmulTask& t, TensorType type);
// Q4_K / Q5_K / Q6_K weights (`type`) x Q8_K activations.
void KQuantDecode(const MatmulTask& t, TensorType type);

}  // namespace cascade::cpu::avx512

#endif  // CASCADE_KERNELS_CPU_AVX512_DECODE_H_
