// Reference (de)quantization of IQ4_NL and IQ4_XS, written from the block formats described
// in quant.h. Dequantization computes each element as the format defines it: d * level
// (IQ4_NL), (d * (scale - 32)) * level (IQ4_XS). Quantization fits each 32 elements on its
// own (see FitLevels); IQ4_XS then shares one fp16 scale per 256 elements and stores each
// sub-block's scale in 6 bits.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/quant.h"
#include "tensor/quant_fit.h"
#include "util/fp16.h"

namespace cascade {
namespace {

constexpr int kLevels = 16;
constexpr int kZeroIndex = 8;  // the level nearest zero (1): for an all-zero block

// The index of the level nearest v (levels ascending; ties to the lower).
int NearestLevel(float v) {
  int lo = 0, hi = kLevels - 1;
  while (hi - lo > 1) {  // invariant: the answer lies in [lo, hi]
    const int mid = (lo + hi) / 2;
    (v < kIq4Levels[mid] ? hi : lo) = mid;
  }
  return v - kIq4Levels[lo] <= kIq4Levels[hi] - v ? lo : hi;
}

// Indices of 32 elements for scale d (the all-zero-scale case maps to kZeroIndex).
void Assign(const float* x, float d, uint8_t* idx) {
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQK; ++j) idx[j] = d != 0 ? NearestLevel(x[j] * id) : kZeroIndex;
}

// The scale and indices of least squared error for 32 elements: candidates map the
// element of largest magnitude to a level near either end of the table (the scale may be
// negative, mirroring the table); for each, the indices nearest to x / d, then the
// least-squares scale for those indices. Returns the best scale (not yet rounded to fp16).
float FitLevels(const float* x, uint8_t* idx) {
  float vmax = 0;
  for (int j = 0; j < kQK; ++j) {
    if (std::fabs(x[j]) > std::fabs(vmax)) vmax = x[j];
  }
  if (vmax == 0) {
    std::fill_n(idx, kQK, kZeroIndex);
    return 0;
  }
  float best_d = 0, best_err = INFINITY;
  uint8_t trial[kQK];
  for (int end : {kIq4Levels[0], kIq4Levels[kLevels - 1]}) {
    for (int t = -4; t <= 4; ++t) {
      Assign(x, vmax / static_cast<float>(end + 2 * t), trial);
      double xl = 0, ll = 0;
      for (int j = 0; j < kQK; ++j) {
        xl += static_cast<double>(x[j]) * kIq4Levels[trial[j]];
        ll += static_cast<double>(kIq4Levels[trial[j]]) * kIq4Levels[trial[j]];
      }
      const float d = static_cast<float>(xl / ll);
      double err = 0;
      for (int j = 0; j < kQK; ++j) {
        const double e = x[j] - static_cast<double>(d) * kIq4Levels[trial[j]];
        err += e * e;
      }
      if (err < best_err) {
        best_err = static_cast<float>(err);
        best_d = d;
        std::memcpy(idx, trial, kQK);
      }
    }
  }
  return best_d;
}

// 32 indices into 16 bytes as Q4_0 packs nibbles: element j low, j + 16 high.
void PackNibbles(const uint8_t* idx, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(idx[j] | (idx[j + 16] << 4));
}

void DequantizeLevels(const uint8_t* qs, float d, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Levels[qs[j] & 0xF]);
    y[j + 16] = d * static_cast<float>(kIq4Levels[qs[j] >> 4]);
  }
}

}  // namespace

void DequantizeIQ4NL(const BlockIQ4NL* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQK; ++b) DequantizeLevels(x[b].qs, Fp16ToFloat(x[b].d), y + b * kQK);
}

void DequantizeIQ4XS(const BlockIQ4XS* x, int64_t n, float* y) {
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float d = Fp16ToFloat(x[b].d);
    for (int s = 0; s < kQKK / kQK; ++s) {
      const float dl = d * static_cast<float>(Iq4XsScale(x[b], s) - 32);
      DequantizeLevels(x[b].qs + 16 * s, dl, y + b * kQKK + s * kQK);
    }
  }
}

void QuantizeIQ4NL(const float* x, int64_t n, BlockIQ4NL* y) {
  uint8_t idx[kQK];
  for (int64_t b = 0; b < n / kQK; ++b) {
    const float* xb = x + b * kQK;
    const uint16_t d = FloatToFp16(FitLevels(xb, idx));
    Assign(xb, Fp16ToFloat(d), idx);  // the indices for the scale as stored
    y[b].d = d;
    PackNibbles(idx, y[b].qs);
  }
}

void QuantizeIQ4XS(const float* x, int64_t n, BlockIQ4XS* y) {
  constexpr int kSubs = kQKK / kQK;
  uint8_t idx[kQK];
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float* xb = x + b * kQKK;
    float sub[kSubs];
    float dmax = 0;  // the sub-block scale of largest magnitude
    for (int s = 0; s < kSubs; ++s) {
      sub[s] = FitLevels(xb + s * kQK, idx);
      if (std::fabs(sub[s]) > std::fabs(dmax)) dmax = sub[s];
    }
    // dmax takes the stored scale 0 (-32 after the offset), the end of widest reach.
    BlockIQ4XS& out = y[b];
    out.d = FloatToFp16(dmax / -32.0f);
    const float d = Fp16ToFloat(out.d);
    out.scales_h = 0;
    std::memset(out.scales_l, 0, sizeof(out.scales_l));
    for (int s = 0; s < kSubs; ++s) {
      const int ls = d != 0 ? std::clamp(quant_internal::NearestInt(sub[s] / d) + 32, 0, 63) : 32;
      out.scales_l[s / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (s % 2)));
      out.scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * s));
      Assign(xb + s * kQK, d * static_cast<float>(ls - 32), idx);
      PackNibbles(idx, out.qs + 16 * s);
    }
  }
}

}  // namespace cascade
