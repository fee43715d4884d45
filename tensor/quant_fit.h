// Internal to tensor/: the scale fitting shared by the reference quantizers (quant.cc and
// quant_legacy.cc, quant_k23.cc), written from the ggml block formats' reference algorithms.
//
// Contract: pure functions of their arguments; n <= 32 values per call.
#ifndef CASCADE_TENSOR_QUANT_FIT_H_
#define CASCADE_TENSOR_QUANT_FIT_H_

#include <cmath>
#include <cstdint>

namespace cascade::quant_internal {

// The value of largest magnitude among x[0..n), with its sign (the first of equal
// magnitudes): the symmetric 32-element formats (Q4_0, Q5_0) scale by it.
inline float SignedAbsMax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// Round half to even, as ggml's nearest_int (valid for |f| < 2^22).
inline int NearestInt(float f) { return static_cast<int>(std::nearbyint(f)); }

// Asymmetric fit of n values to codes 0..nmax with scale and min, weighted least squares
// over nstep + 1 trial scales (ggml make_qkx2_quants). Returns the scale; *the_min
// receives -min (>= 0); L the codes; Laux is n bytes of scratch.
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                     float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep);

// Symmetric fit of n values to codes -nmax..nmax-1 (ggml make_qx_quants, rmse_type 1).
// L receives codes + nmax. Returns the scale.
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L);

}  // namespace cascade::quant_internal

#endif  // CASCADE_TENSOR_QUANT_FIT_H_
