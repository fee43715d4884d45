// Internal: helpers of the AVX-512 integer kernels (kernels_avx512_decode.cc and
// kernels_avx512_grouped.cc), written for their ISA region: include only inside a
// CASCADE_TARGET_BEGIN region with AVX2 enabled (isa_target.h). Internal linkage, so each
// translation unit keeps its own copy compiled for its region.
#ifndef CASCADE_KERNELS_CPU_AVX512_QUANT_UTIL_H_
#define CASCADE_KERNELS_CPU_AVX512_QUANT_UTIL_H_

namespace cascade::cpu::avx512 {
namespace {

// Sum of the 32 signed codes of a Q8_0 block (exact): what the -8 sum(x) (Q4_0) or
// -128 sum(x) (Q8_0) offset of the unsigned weight codes multiplies.
CASCADE_HOT int32_t CodeSum(const int8_t* qs) {
  const __m256i u = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs)),
                                     _mm256_set1_epi8(static_cast<char>(0x80)));
  const __m256i s = _mm256_sad_epu8(u, _mm256_setzero_si256());  // 4 sums of (x + 128)
  const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  return static_cast<int32_t>(_mm_cvtsi128_si64(_mm_add_epi64(h, _mm_unpackhi_epi64(h, h)))) -
         32 * 128;
}

}  // namespace
}  // namespace cascade::cpu::avx512

#endif  // CASCADE_KERNELS_CPU_AVX512_QUANT_UTIL_H_
