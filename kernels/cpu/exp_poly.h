// Internal: the constants of the vectorized exp that attention's softmax and SiLU use
// (AVX2 Exp8 in kernels_avx2_attention.cc, AVX-512 Exp16 in kernels_avx512_attention.cc):
// Cody-Waite reduction by ln 2 and a degree-5 minimax polynomial (Cephes expf), then 2^n
// through the exponent. One list, so the two widths stay bit for bit the same function.
// Plain constants: baseline code wherever included.
#ifndef CASCADE_KERNELS_CPU_EXP_POLY_H_
#define CASCADE_KERNELS_CPU_EXP_POLY_H_

namespace cascade::cpu::exp_poly {

inline constexpr float kMinX = -87.33654f;  // inputs clamped to [kMinX, kMaxX]
inline constexpr float kMaxX = 88.3762626647949f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;  // ln 2 = kLn2Hi + kLn2Lo
inline constexpr float kLn2Lo = -2.12194440e-4f;
// p(r) = ((((kP[0] r + kP[1]) r + kP[2]) r + kP[3]) r + kP[4]) r + kP[5];
// exp(r) ~ p(r) r^2 + r + 1.
inline constexpr float kP[6] = {1.9875691500E-4f, 1.3981999507E-3f, 8.3334519073E-3f,
                                4.1665795894E-2f, 1.6666665459E-1f, 5.0000001201E-1f};

}  // namespace cascade::cpu::exp_poly

#endif  // CASCADE_KERNELS_CPU_EXP_POLY_H_
