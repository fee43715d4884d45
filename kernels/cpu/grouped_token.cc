#include "kernels/cpu/grouped_token.h"

#include <cstring>

#include "kernels/cpu/kernel_table.h"
#include "tensor/quant.h"
#include "util/fp16.h"

namespace cascade::cpu {
namespace {

// One block of 32 activations x, quantized as the AVX2 kernels quantize them (`avx2`: their
// table), S starting from base_per_code * sum(codes).
void PrepareToken(const KernelTable& avx2, const float* x, int32_t base_per_code,
                  GroupedToken* out) {
  BlockQ8_0 blk;
  avx2.quantize_q8_0(x, kQK, &blk);
  std::memcpy(out->qs, blk.qs, sizeof(out->qs));
  out->d = Fp16ToFloat(blk.d);
  int32_t sum = 0;
  for (int8_t c : blk.qs) sum += c;
  out->base = base_per_code * sum;
}

// One super-block of 256 activations x, quantized as the AVX2 kernels quantize them.
void PrepareKToken(const KernelTable& avx2, const float* x, GroupedKToken* out) {
  BlockQ8K blk;
  avx2.quantize_q8k(x, kQKK, &blk);
  std::memcpy(out->qs, blk.qs, sizeof(out->qs));
  // Sub-block s's sum, bsums 2s and 2s + 1: |sum of 32 codes| <= 32 * 127, an int16.
  auto sum = [&](int sb) {
    return static_cast<uint16_t>(blk.bsums[2 * sb] + blk.bsums[2 * sb + 1]);
  };
  static constexpr int kPairs[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
  for (int p = 0; p < 4; ++p) {
    out->sum_pairs[p] =
        static_cast<int32_t>(sum(kPairs[p][0]) | (static_cast<uint32_t>(sum(kPairs[p][1])) << 16));
  }
  out->d = blk.d;
}

}  // namespace

size_t GroupedTokensBytes(TensorType type, int64_t n, int64_t k) {
  if (type == TensorType::kQ4_K) {
    return static_cast<size_t>(n) * static_cast<size_t>(k / kQKK) * sizeof(GroupedKToken);
  }
  return static_cast<size_t>(n) * static_cast<size_t>(k / kQK) * sizeof(GroupedToken);
}

void PrepareGroupedTokens(TensorType type, const float* x, int64_t k, int64_t n, int64_t i0,
                          int64_t i1, uint8_t* out) {
  const KernelTable& avx2 = Avx2Kernels();  // once per call, not per block
  if (type == TensorType::kQ4_K) {
    auto* tokens = reinterpret_cast<GroupedKToken*>(out);
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t b = 0; b < k / kQKK; ++b) {
        PrepareKToken(avx2, x + i * k + b * kQKK, &tokens[b * n + i]);
      }
    }
    return;
  }
  const int32_t base_per_code = type == TensorType::kQ8_0 ? -128 : -8;
  auto* tokens = reinterpret_cast<GroupedToken*>(out);
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t b = 0; b < k / kQK; ++b) {
      PrepareToken(avx2, x + i * k + b * kQK, base_per_code, &tokens[b * n + i]);
    }
  }
}

}  // namespace cascade::cpu
