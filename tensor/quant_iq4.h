// The kernels' view of an IQ4_NL / IQ4_XS row (tensor/quant.h) as 32-element blocks, for
// the CPU kernels. Pure inline functions, thread-safe.
#ifndef CASCADE_TENSOR_QUANT_IQ4_H_
#define CASCADE_TENSOR_QUANT_IQ4_H_

#include "tensor/quant.h"
#include "util/fp16.h"

namespace cascade {

// Block b's 16 index bytes (as Q4_0's nibbles) and its float scale (IQ4_XS:
// d * (scale - 32), as DequantizeIQ4XS computes it).
inline const uint8_t* Iq4Indices(const BlockIQ4NL* row, int64_t b) { return row[b].qs; }
inline const uint8_t* Iq4Indices(const BlockIQ4XS* row, int64_t b) {
  return row[b / 8].qs + 16 * (b % 8);
}
inline float Iq4Scale(const BlockIQ4NL* row, int64_t b) { return Fp16ToFloat(row[b].d); }
inline float Iq4Scale(const BlockIQ4XS* row, int64_t b) {
  return Fp16ToFloat(row[b / 8].d) * static_cast<float>(Iq4XsScale(row[b / 8], b % 8) - 32);
}

}  // namespace cascade

#endif  // CASCADE_TENSOR_QUANT_IQ4_H_
