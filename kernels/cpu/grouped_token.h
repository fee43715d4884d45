// Internal: a token's Q8_0 block as the grouped Q4_0 / Q8_0 kernels read it (AVX2:
// kernels_avx2_grouped.cc; AVX-512: kernels_avx512_grouped.cc). Plain data, no intrinsics:
// baseline code wherever it is included.
#ifndef CASCADE_KERNELS_CPU_GROUPED_TOKEN_H_
#define CASCADE_KERNELS_CPU_GROUPED_TOKEN_H_

#include <cstdint>

namespace cascade::cpu {

// The codes, the scale as float and the integer S starts from (-8 sum(codes) for Q4_0, whose
// nibbles are code + 8; -128 sum(codes) for Q8_0, stored + 128). Stored (block, token): one
// pointer per block reaches every token, at offsets the instructions carry as constants.
struct GroupedToken {
  int8_t qs[32];
  float d;
  int32_t base;
};
static_assert(sizeof(GroupedToken) == 40);

}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_GROUPED_TOKEN_H_
