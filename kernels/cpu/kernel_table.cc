#include "kernels/cpu/kernel_table.h"

#include "tensor/quant.h"

namespace cascade::cpu {

ActFormat ActFormatFor(TensorType weight_type, bool quantized_activations) {
  if (!quantized_activations) return ActFormat::kF32;
  switch (weight_type) {
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kQ8_0:
    case TensorType::kIQ4_NL:
    case TensorType::kIQ4_XS:
      return ActFormat::kQ8_0;
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
      return ActFormat::kQ8K;
    default:
      return ActFormat::kF32;
  }
}

size_t ActRowBytes(ActFormat f, int64_t k) {
  switch (f) {
    case ActFormat::kF32:
      return static_cast<size_t>(k) * sizeof(float);
    case ActFormat::kQ8_0:
      return static_cast<size_t>(k / kQK) * sizeof(BlockQ8_0);
    case ActFormat::kQ8K:
      return static_cast<size_t>(k / kQKK) * sizeof(BlockQ8K);
  }
  return 0;
}

const KernelTable& KernelTableFor(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return Avx512Kernels();
    case CpuIsa::kAvx2:
      return Avx2Kernels();
    case CpuIsa::kScalar:
      break;
  }
  return ScalarKernels();
}

}  // namespace cascade::cpu
