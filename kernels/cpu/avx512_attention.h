// Internal: the AVX-512 attention of a tile of queries of one sequence over its paged KV
// cache for one GQA group (kernels_avx512_attention.cc): KernelTable::attention_group of
// the AVX-512 table.
//
// Contract: call only where the CPU has AVX-512 F/BW/VL/DQ (with AVX2, FMA, F16C); as
// KernelTable::attention_group, and bit for bit the AVX2 kernel's results (scores,
// softmax and outputs in the same order). Thread-safe; writes only the queries' outputs of
// the group's heads and `scratch`; never allocates.
#ifndef CASCADE_KERNELS_CPU_AVX512_ATTENTION_H_
#define CASCADE_KERNELS_CPU_AVX512_ATTENTION_H_

#include "kernels/backend.h"

namespace cascade::cpu::avx512 {

void AttentionGroup(const AttentionParams& p, const AttentionQuery* qs, int n, int kv_head,
                    float* scratch);

}  // namespace cascade::cpu::avx512

#endif  // CASCADE_KERNELS_CPU_AVX512_ATTENTION_H_
