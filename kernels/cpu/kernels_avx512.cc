// The AVX-512 kernel table: the AVX2 table with the float GEMM (prefill of F32/F16/BF16
// weights, 16 tokens and more) run in 512-bit registers: 32-row panels x 12-token tiles,
// twice the FMA width of AVX2 per instruction, and bit for bit the AVX2 GEMM's results
// (gemm_lanes.h), so decode (AVX2 tiles) and prefill still agree on every row. The other
// kernels are memory-bound (decode) or integer (quantized) and stay AVX2 for now.
//
// Only the GEMM's own code is compiled for AVX-512 (the pragma below, after every other
// include): inline functions of the shared headers stay baseline code here, so the linker
// can never hand an AVX2-only CPU an AVX-512 copy of one of them.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/gemm_layout.h"
#include "kernels/cpu/kernel_table.h"
#include "model/tensor_type.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2")

#include "kernels/cpu/gemm_lanes.h"

namespace cascade::cpu {
namespace {

struct Zmm {
  using V = __m512;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void StoreFirst(float* p, V v, int count) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << count) - 1), v);
  }
  static V Splat(const float* p) { return _mm512_set1_ps(*p); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
};

// Float activations with float weights: the GEMM from kGemmMinTokens tokens on, the AVX2
// kernels below (decode and micro-batches, which stream the weights once).
template <TensorType kType>
void MatmulF32Act(const MatmulTask& t) {
  if (t.n >= kGemmMinTokens) {
    lanes16::LaneGemm<Zmm>(t, kType);
  } else {
    Avx2Kernels().matmul(kType, ActFormat::kF32)(t);
  }
}

MatmulFn Avx512Matmul(TensorType type, ActFormat act) {
  if (act == ActFormat::kF32) {
    switch (type) {
      case TensorType::kF32:
        return &MatmulF32Act<TensorType::kF32>;
      case TensorType::kF16:
        return &MatmulF32Act<TensorType::kF16>;
      case TensorType::kBF16:
        return &MatmulF32Act<TensorType::kBF16>;
      default:
        break;
    }
  }
  return Avx2Kernels().matmul(type, act);
}

}  // namespace

const KernelTable& Avx512Kernels() {
  static const KernelTable table = [] {
    KernelTable t = Avx2Kernels();
    t.isa = CpuIsa::kAvx512;
    t.matmul = &Avx512Matmul;
    return t;
  }();
  return table;
}

}  // namespace cascade::cpu

#pragma GCC pop_options
