// Internal: a token's activation blocks as the grouped kernels read them (AVX2:
// kernels_avx2_grouped.cc; AVX-512 VNNI: kernels_avx512_grouped.cc), and how one is made from
// the AVX2 table's quantizers. Plain data and scalar code, no intrinsics: baseline code
// wherever it is included. Thread-safe (pure functions).
#ifndef CASCADE_KERNELS_CPU_GROUPED_TOKEN_H_
#define CASCADE_KERNELS_CPU_GROUPED_TOKEN_H_

#include <cstdint>
#include <cstring>

#include "kernels/cpu/kernel_table.h"
#include "tensor/quant.h"
#include "util/fp16.h"

namespace cascade::cpu {

// A Q8_0 block: the codes, the scale as float and the integer S starts from (-8 sum(codes)
// for Q4_0, whose nibbles are code + 8; -128 sum(codes) for Q8_0 stored + 128). Stored
// (block, token): one pointer per block reaches every token, at offsets the instructions
// carry as constants.
struct GroupedToken {
  int8_t qs[32];
  float d;
  int32_t base;
};
static_assert(sizeof(GroupedToken) == 40);

// A Q8_K super-block as the Q4_K kernels read it: the codes; the sums of its 8 sub-blocks of
// 32 codes as int16 pairs (0, 2), (1, 3), (4, 6), (5, 7), what the rows' min pairs multiply;
// the scale.
struct GroupedKToken {
  int8_t qs[256];
  int32_t sum_pairs[4];
  float d;
};
static_assert(sizeof(GroupedKToken) == 276);

// One block of 32 activations x, quantized as the AVX2 kernels quantize them (`avx2`: their
// table), S starting from base_per_code * sum(codes).
inline void PrepareToken(const KernelTable& avx2, const float* x, int32_t base_per_code,
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
inline void PrepareKToken(const KernelTable& avx2, const float* x, GroupedKToken* out) {
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

}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_GROUPED_TOKEN_H_
