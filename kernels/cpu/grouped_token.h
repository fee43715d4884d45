// Internal: a token's activation blocks as the grouped kernels read them (AVX2:
// kernels_avx2_grouped.cc; AVX-512 VNNI: kernels_avx512_grouped.cc), and their preparation,
// written once for both (grouped_token.cc, baseline code calling the AVX2 table's
// quantizers). Thread-safe (pure functions).
#ifndef CASCADE_KERNELS_CPU_GROUPED_TOKEN_H_
#define CASCADE_KERNELS_CPU_GROUPED_TOKEN_H_

#include <cstddef>
#include <cstdint>

#include "tensor/tensor_type.h"

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

// The prepared activations of a grouped matmul, the same for every ISA's grouped kernel
// (kernel_table.h: grouped_tokens_bytes, prepare_grouped): for Q4_0 and Q8_0 one
// GroupedToken per 32 activations (S from -8 sum(codes) or -128 sum(codes)), for Q4_K one
// GroupedKToken per 256, stored (block, token). The codes are those the AVX2 table's
// quantizers give, so grouped and file-layout kernels multiply the same integers. Call
// PrepareGroupedTokens only where the CPU has AVX2; rows [i0, i1) of n, and disjoint
// ranges may run concurrently.
size_t GroupedTokensBytes(TensorType type, int64_t n, int64_t k);
void PrepareGroupedTokens(TensorType type, const float* x, int64_t k, int64_t n, int64_t i0,
                          int64_t i1, uint8_t* out);

}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_GROUPED_TOKEN_H_
