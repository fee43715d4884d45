// Reference (de)quantization of the 2- and 3-bit K-quants (Q2_K, Q3_K), written from the
// ggml block formats described in quant.h. Dequantization computes each element as the
// format defines it (the sub-block's scale d * sc in float, times the code, minus Q2_K's
// dmin * min); quantization follows ggml's reference algorithms (Q2_K: make_qkx2_quants per
// 16 elements, weighted by |x|; Q3_K fits its 16-element scales with make_qx_quants, where
// ggml's make_q3_quants refines them further: valid codes, a slightly larger error).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/quant.h"
#include "tensor/quant_fit.h"
#include "util/fp16.h"

namespace cascade {
namespace {

using quant_internal::MakeQkx2Quants;
using quant_internal::MakeQxQuants;
using quant_internal::NearestInt;

// The 2 low bits of element e of a Q2_K/Q3_K super-block.
inline int Low2(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

// Packs 256 codes (0..3) of a Q2_K/Q3_K super-block into qs (Low2's layout).
void PackLow2(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* c = L + 128 * h + l;
      qs[32 * h + l] = static_cast<uint8_t>((c[0] & 3) | ((c[32] & 3) << 2) | ((c[64] & 3) << 4) |
                                            ((c[96] & 3) << 6));
    }
  }
}

}  // namespace

void DequantizeQ2K(const BlockQ2K* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = Fp16ToFloat(x[i].d), dmin = Fp16ToFloat(x[i].dmin);
    for (int e = 0; e < kQKK; ++e) {
      const uint8_t sc = x[i].scales[e / 16];
      const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
      *y++ = dl * static_cast<float>(Low2(x[i].qs, e)) - ml;
    }
  }
}

void DequantizeQ3K(const BlockQ3K* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = Fp16ToFloat(x[i].d);
    for (int e = 0; e < kQKK; ++e) {
      const float dl = d * static_cast<float>(GetScaleQ3K(e / 16, x[i].scales));
      const int high = (x[i].hmask[e % 32] >> (e / 32)) & 1;
      *y++ = dl * static_cast<float>(Low2(x[i].qs, e) - (high ? 0 : 4));
    }
  }
}

void QuantizeQ2K(const float* x, int64_t n, BlockQ2K* y) {
  uint8_t L[kQKK], Laux[16];
  float weights[16], scales[16], mins[16];
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] =
          MakeQkx2Quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    const float iscale = max_scale > 0 ? 15.f / max_scale : 0.f;
    const float imin = max_min > 0 ? 15.f / max_min : 0.f;
    for (int j = 0; j < 16; ++j) {
      const int ls = std::min(15, NearestInt(iscale * scales[j]));
      const int lm = std::min(15, NearestInt(imin * mins[j]));
      y[i].scales[j] = static_cast<uint8_t>(ls | (lm << 4));
    }
    y[i].d = FloatToFp16(max_scale / 15.f);
    y[i].dmin = FloatToFp16(max_min / 15.f);
    const float d = Fp16ToFloat(y[i].d), dmin = Fp16ToFloat(y[i].dmin);
    for (int j = 0; j < 16; ++j) {
      const float dl = d * static_cast<float>(y[i].scales[j] & 0xF);
      if (dl == 0) continue;
      const float ml = dmin * static_cast<float>(y[i].scales[j] >> 4);
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] =
            static_cast<uint8_t>(std::clamp(NearestInt((x[16 * j + l] + ml) / dl), 0, 3));
      }
    }
    PackLow2(L, y[i].qs);
  }
}

void QuantizeQ3K(const float* x, int64_t n, BlockQ3K* y) {
  int8_t L[kQKK];
  float scales[16];
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    std::memset(&y[i], 0, sizeof(BlockQ3K));
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = MakeQxQuants(16, 4, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    if (amax < 1e-15f) continue;  // all zero: d = 0 and every code 0 (value 0 either way)
    const float iscale = -32.f / max_scale;
    for (int j = 0; j < 16; ++j) {
      const int l = std::clamp(NearestInt(iscale * scales[j]), -32, 31) + 32;
      y[i].scales[j % 8] |= static_cast<uint8_t>((l & 0xF) << (4 * (j / 8)));
      y[i].scales[8 + j % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
    }
    y[i].d = FloatToFp16(1 / iscale);
    const float d = Fp16ToFloat(y[i].d);
    for (int j = 0; j < 16; ++j) {
      const float dl = d * static_cast<float>(GetScaleQ3K(j, y[i].scales));
      if (dl == 0) continue;
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] = static_cast<int8_t>(std::clamp(NearestInt(x[16 * j + l] / dl), -4, 3) + 4);
      }
    }
    uint8_t low[kQKK];
    for (int e = 0; e < kQKK; ++e) {
      if (L[e] > 3) y[i].hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
      low[e] = static_cast<uint8_t>(L[e] & 3);
    }
    PackLow2(low, y[i].qs);
  }
}

}  // namespace cascade
