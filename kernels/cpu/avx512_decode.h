// Internal: the AVX-512 decode kernels (kernels_avx512_decode.cc): matmuls of a few tokens
// (decode and micro-batches) that stream the weight rows in place, once per call.
//
// Each kernel gives bit for bit the AVX2 kernel's results for the same task, in the order
// kernel_table.h fixes, so the AVX-512 table stays batch invariant across decode,
// micro-batches and prefill:
// quantized weights x quantized activations (VNNI), 16 rows at a time: per block or
// super-block the exact integer sums, reduced into the 16 lanes of one register, then the
// AVX2 float steps in the same order, one instruction for 16 outputs. (Float weights x one
// token take the AVX2 kernel: two rows at a time read the memory at its rate, and 512-bit
// registers add nothing there; an AVX-512 one in 4- and 8-row tiles streamed 5-10% slower.)
//
// Contract: call QuantDecode / KQuantDecode only when the CPU has AVX-512 F/BW/VL/DQ and
// VNNI (with AVX2, FMA and F16C); with t.n in [1, kQuantDecodeMaxTokens] (Q8_0 / Q4_0 /
// IQ4_NL / IQ4_XS / Q4_1 / Q5_0 / Q5_1 weights, BlockQ8_0 activation rows) or [1, KQuantDecodeMaxTokens(type)] (Q4_K / Q5_K /
// Q6_K weights, BlockQ8K rows); t.k a multiple of the block; and
// t.r1 >= 16: a range's last, partial group of rows is moved down to end at t.r1 and
// re-reads up to 15 rows below the range, never writing them (smaller matrices: the AVX2
// kernel). t.scratch holds ScratchFloats(t.k) floats. Thread-safe: writes only rows
// [t.r0, t.r1) of y and t.scratch; never allocates.
#ifndef CASCADE_KERNELS_CPU_AVX512_DECODE_H_
#define CASCADE_KERNELS_CPU_AVX512_DECODE_H_

#include <cstdint>

#include "kernels/cpu/kernel_table.h"
#include "tensor/tensor_type.h"

namespace cascade::cpu::avx512 {

// Most tokens the decode kernels take (more go to the blocked 16-lane panels). Q8_0 / Q4_0
// hold kQuantPassTokens tokens in registers and take more in passes over the same rows:
// up to 16 tokens that costs less than expanding the rows into panels.
inline constexpr int64_t kQuantPassTokens = 8;
inline constexpr int64_t kQuantDecodeMaxTokens = 16;
// K-quants up to 16 tokens (Q6_K: 32), then the panels. Measured (kernel_bench, 5632 x
// 2048, one Zen 4 thread, GOP/s, two rounds): Q6_K in this kernel n=16 126-144, n=24
// 143-148, n=32 151-156, against the panels' 51-56 at n=16 (the AVX2 kernels: 74-95);
// Q5_K n=16 116-127 against the panels' 79-118, but n=32 119-126 against AVX2's panels'
// 140-153.
constexpr int64_t KQuantDecodeMaxTokens(TensorType type) {
  return type == TensorType::kQ6_K ? 32 : 16;
}

// Q8_0 / Q4_0 / IQ4_NL / IQ4_XS / Q4_1 / Q5_0 / Q5_1 weights (`type`) x Q8_0 activations.
void QuantDecode(const MatmulTask& t, TensorType type);
// Q2_K / Q3_K / Q4_K / Q5_K / Q6_K weights (`type`) x Q8_K activations.
void KQuantDecode(const MatmulTask& t, TensorType type);

}  // namespace cascade::cpu::avx512

#endif  // CASCADE_KERNELS_CPU_AVX512_DECODE_H_
