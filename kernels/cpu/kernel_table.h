// Internal: the per-ISA kernel entry points the CPU backend dispatches to.
//
// Contract: each ISA (scalar, AVX2, AVX-512) provides one KernelTable, compiled in its own
// translation unit with that ISA's flags; KernelTableFor() returns the table for an ISA the
// CPU supports (never call into a table the CPU lacks). Kernels are pure functions of their
// arguments and thread-safe; they never allocate.
//
// Batch invariance: a matmul kernel computes every output element y[t][r] with the same
// reduction order whatever n, r0/r1 or tiling it is called with: eight lanes accumulate
// the products of elements e with e % 8 == lane (per block for quantized types), then the
// lanes are summed as ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)).
#ifndef CASCADE_KERNELS_CPU_KERNEL_TABLE_H_
#define CASCADE_KERNELS_CPU_KERNEL_TABLE_H_

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_features.h"
#include "model/tensor_type.h"

namespace cascade::cpu {

// How activations are presented to a matmul kernel.
enum class ActFormat {
  kF32,   // plain floats
  kQ8_0,  // BlockQ8_0 per 32 elements (for Q4_0 / Q8_0 weights)
  kQ8K,   // BlockQ8K per 256 elements (for K-quant weights)
};

// The activation format a weight type is multiplied with. With quantized_activations off,
// quantized weights are dequantized and multiplied in F32 (slower, closest to exact).
ActFormat ActFormatFor(TensorType weight_type, bool quantized_activations);
// Bytes of one prepared activation row of k elements.
size_t ActRowBytes(ActFormat f, int64_t k);

struct MatmulTask {
  const uint8_t* w = nullptr;  // weight rows, w_stride bytes apart
  size_t w_stride = 0;
  int64_t k = 0;               // elements per row
  const uint8_t* x = nullptr;  // prepared activation rows, x_stride bytes apart
  size_t x_stride = 0;
  int64_t n = 0;       // activation rows
  float* y = nullptr;  // output: y[t * ldy + r]
  int64_t ldy = 0;
  int64_t r0 = 0, r1 = 0;    // weight rows to compute
  float* scratch = nullptr;  // per-thread, >= kScratchRows * k floats
};
constexpr int kScratchRows = 8;

using MatmulFn = void (*)(const MatmulTask&);

struct KernelTable {
  CpuIsa isa;
  // Matmul for a weight type and activation format; null when the pair is unsupported.
  MatmulFn (*matmul)(TensorType weight_type, ActFormat act);
  void (*quantize_q8_0)(const float* x, int64_t k, void* out);  // k % 32 == 0
  void (*quantize_q8k)(const float* x, int64_t k, void* out);   // k % 256 == 0
  // Canonical-order dot product of two float vectors.
  float (*dot)(const float* a, const float* b, int64_t n);
  // y += a * x
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  // y *= a
  void (*scale)(float a, float* y, int64_t n);
  // Sum of squares in canonical order.
  float (*sum_squares)(const float* x, int64_t n);
};

const KernelTable& ScalarKernels();
const KernelTable& Avx2Kernels();
const KernelTable& KernelTableFor(CpuIsa isa);

// Lane reduction shared by every ISA: ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)).
inline float ReduceLanes8(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_KERNEL_TABLE_H_
