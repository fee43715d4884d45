#include "tensor/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/quant_fit.h"
#include "util/fp16.h"

namespace cascade {
namespace quant_internal {

float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                     float* the_min, uint8_t* Laux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, 0);
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    int l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
    L[i] = static_cast<uint8_t>(l);
    float diff = scale * l + min - x[i];
    best_error += weights[i] * diff * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = static_cast<uint8_t>(l);
      float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        cur_error += weights[i] * diff * diff;
      }
      if (cur_error < best_error) {
        std::copy(Laux, Laux + n, L);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

float MakeQxQuants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    std::fill(L, L + n, 0);
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l + nmax);
    float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 > 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
      float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        int l = std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
        L[i] = static_cast<int8_t>(nmax + l);
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

}  // namespace quant_internal

namespace {

using quant_internal::MakeQkx2Quants;
using quant_internal::MakeQxQuants;
using quant_internal::NearestInt;

// Shared by Q4_K and Q5_K: fits 8 sub-blocks of 32, packs the 6-bit scales/mins, and
// returns the final codes in L (0..nmax).
void QuantizeKScalesMins(const float* x, int nmax, float rmin, float rdelta, int nstep,
                         uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales_out, uint8_t* L) {
  float mins[8], scales[8], weights[32];
  uint8_t Laux[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] =
        MakeQkx2Quants(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = static_cast<uint8_t>(std::min(63, NearestInt(inv_scale * scales[j])));
    uint8_t lm = static_cast<uint8_t>(std::min(63, NearestInt(inv_min * mins[j])));
    if (j < 4) {
      scales_out[j] = ls;
      scales_out[j + 4] = lm;
    } else {
      scales_out[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      scales_out[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      scales_out[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d_out = FloatToFp16(max_scale / 63.f);
  *dmin_out = FloatToFp16(max_min / 63.f);
  const float d = Fp16ToFloat(*d_out), dmin = Fp16ToFloat(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    GetScaleMinK4(j, scales_out, &sc, &m);
    const float dd = d * sc;
    if (dd == 0) continue;
    const float dm = dmin * m;
    for (int ii = 0; ii < 32; ++ii) {
      L[32 * j + ii] =
          static_cast<uint8_t>(std::clamp(NearestInt((x[32 * j + ii] + dm) / dd), 0, nmax));
    }
  }
}

}  // namespace

void DequantizeQ4_0(const BlockQ4_0* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFloat(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[32 * i + j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
      y[32 * i + j + 16] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantizeQ8_0(const BlockQ8_0* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFloat(x[i].d);
    for (int j = 0; j < 32; ++j) y[32 * i + j] = x[i].qs[j] * d;
  }
}

void DequantizeQ4K(const BlockQ4K* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = Fp16ToFloat(x[i].d), min = Fp16ToFloat(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int c = 0, is = 0; c < 4; ++c, is += 2, q += 32) {
      uint8_t sc, m;
      GetScaleMinK4(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      GetScaleMinK4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void DequantizeQ5K(const BlockQ5K* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = Fp16ToFloat(x[i].d), min = Fp16ToFloat(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    uint8_t u1 = 1, u2 = 2;
    for (int c = 0, is = 0; c < 4; ++c, is += 2, ql += 32) {
      uint8_t sc, m;
      GetScaleMinK4(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      GetScaleMinK4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void DequantizeQ6K(const BlockQ6K* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = Fp16ToFloat(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

bool DequantizeRow(TensorType type, const void* src, int64_t n, float* dst) {
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return true;
    case TensorType::kF16:
    case TensorType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        dst[i] = type == TensorType::kF16 ? Fp16ToFloat(h[i]) : Bf16ToFloat(h[i]);
      }
      return true;
    }
    case TensorType::kQ4_0:
      DequantizeQ4_0(static_cast<const BlockQ4_0*>(src), n, dst);
      return true;
    case TensorType::kQ8_0:
      DequantizeQ8_0(static_cast<const BlockQ8_0*>(src), n, dst);
      return true;
    case TensorType::kQ4_1:
      DequantizeQ4_1(static_cast<const BlockQ4_1*>(src), n, dst);
      return true;
    case TensorType::kQ5_0:
      DequantizeQ5_0(static_cast<const BlockQ5_0*>(src), n, dst);
      return true;
    case TensorType::kQ5_1:
      DequantizeQ5_1(static_cast<const BlockQ5_1*>(src), n, dst);
      return true;
    case TensorType::kQ2_K:
      DequantizeQ2K(static_cast<const BlockQ2K*>(src), n, dst);
      return true;
    case TensorType::kQ3_K:
      DequantizeQ3K(static_cast<const BlockQ3K*>(src), n, dst);
      return true;
    case TensorType::kIQ4_NL:
      DequantizeIQ4NL(static_cast<const BlockIQ4NL*>(src), n, dst);
      return true;
    case TensorType::kIQ4_XS:
      DequantizeIQ4XS(static_cast<const BlockIQ4XS*>(src), n, dst);
      return true;
    case TensorType::kQ4_K:
      DequantizeQ4K(static_cast<const BlockQ4K*>(src), n, dst);
      return true;
    case TensorType::kQ5_K:
      DequantizeQ5K(static_cast<const BlockQ5K*>(src), n, dst);
      return true;
    case TensorType::kQ6_K:
      DequantizeQ6K(static_cast<const BlockQ6K*>(src), n, dst);
      return true;
    default:
      return false;
  }
}

void QuantizeQ8_0(const float* x, int64_t n, BlockQ8_0* y) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = FloatToFp16(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  }
}

void QuantizeQ4_0(const float* x, int64_t n, BlockQ4_0* y) {
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float max = quant_internal::SignedAbsMax(x, kQK);
    const float d = max / -8;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = FloatToFp16(d);
    for (int j = 0; j < 16; ++j) {
      const int x0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int x1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
      y[i].qs[j] = static_cast<uint8_t>(x0 | (x1 << 4));
    }
  }
}

void QuantizeQ8K(const float* x, int64_t n, BlockQ8K* y) {
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float max = 0, amax = 0;
    for (int j = 0; j < kQKK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0) {
      std::memset(&y[i], 0, sizeof(BlockQ8K));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQKK; ++j) {
      y[i].qs[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * x[j])));
    }
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int k = 0; k < 16; ++k) sum += y[i].qs[16 * g + k];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

void QuantizeQ4K(const float* x, int64_t n, BlockQ4K* y) {
  uint8_t L[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    QuantizeKScalesMins(x, 15, -1.0f, 0.1f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
    uint8_t* q = y[i].qs;
    for (int j = 0; j < kQKK; j += 64) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
      q += 32;
    }
  }
}

void QuantizeQ5K(const float* x, int64_t n, BlockQ5K* y) {
  uint8_t L[kQKK];
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    QuantizeKScalesMins(x, 31, -0.5f, 0.1f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    uint8_t* ql = y[i].qs;
    uint8_t m1 = 1, m2 = 2;
    for (int c = 0; c < 4; ++c) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[64 * c + j];
        if (l1 > 15) {
          l1 -= 16;
          y[i].qh[j] |= m1;
        }
        int l2 = L[64 * c + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          y[i].qh[j] |= m2;
        }
        ql[32 * c + j] = static_cast<uint8_t>(l1 | (l2 << 4));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
  }
}

void QuantizeQ6K(const float* x, int64_t n, BlockQ6K* y) {
  int8_t L[kQKK];
  float scales[16];
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
      const float scale = MakeQxQuants(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      if (std::fabs(scale) > max_abs_scale) {
        max_abs_scale = std::fabs(scale);
        max_scale = scale;
      }
    }
    if (max_abs_scale < 1e-15f) {
      std::memset(&y[i], 0, sizeof(BlockQ6K));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = FloatToFp16(1 / iscale);
    for (int ib = 0; ib < 16; ++ib) {
      y[i].scales[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
    }
    const float d = Fp16ToFloat(y[i].d);
    for (int j = 0; j < 16; ++j) {
      const float dd = d * y[i].scales[j];
      if (dd == 0) continue;
      for (int ii = 0; ii < 16; ++ii) {
        int l = std::clamp(NearestInt(x[16 * j + ii] / dd), -32, 31);
        L[16 * j + ii] = static_cast<int8_t>(l + 32);
      }
    }
    uint8_t* ql = y[i].ql;
    uint8_t* qh = y[i].qh;
    for (int j = 0; j < kQKK; j += 128) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
        ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
        ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
        qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                     ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
      }
      ql += 64;
      qh += 32;
    }
  }
}

bool QuantizeRow(TensorType type, const float* src, int64_t n, void* dst) {
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return true;
    case TensorType::kF16:
    case TensorType::kBF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        h[i] = type == TensorType::kF16 ? FloatToFp16(src[i]) : FloatToBf16(src[i]);
      }
      return true;
    }
    case TensorType::kQ4_0:
      QuantizeQ4_0(src, n, static_cast<BlockQ4_0*>(dst));
      return true;
    case TensorType::kQ8_0:
      QuantizeQ8_0(src, n, static_cast<BlockQ8_0*>(dst));
      return true;
    case TensorType::kQ4_1:
      QuantizeQ4_1(src, n, static_cast<BlockQ4_1*>(dst));
      return true;
    case TensorType::kQ5_0:
      QuantizeQ5_0(src, n, static_cast<BlockQ5_0*>(dst));
      return true;
    case TensorType::kQ5_1:
      QuantizeQ5_1(src, n, static_cast<BlockQ5_1*>(dst));
      return true;
    case TensorType::kQ2_K:
      QuantizeQ2K(src, n, static_cast<BlockQ2K*>(dst));
      return true;
    case TensorType::kQ3_K:
      QuantizeQ3K(src, n, static_cast<BlockQ3K*>(dst));
      return true;
    case TensorType::kIQ4_NL:
      QuantizeIQ4NL(src, n, static_cast<BlockIQ4NL*>(dst));
      return true;
    case TensorType::kIQ4_XS:
      QuantizeIQ4XS(src, n, static_cast<BlockIQ4XS*>(dst));
      return true;
    case TensorType::kQ4_K:
      QuantizeQ4K(src, n, static_cast<BlockQ4K*>(dst));
      return true;
    case TensorType::kQ5_K:
      QuantizeQ5K(src, n, static_cast<BlockQ5K*>(dst));
      return true;
    case TensorType::kQ6_K:
      QuantizeQ6K(src, n, static_cast<BlockQ6K*>(dst));
      return true;
    default:
      return false;
  }
}

}  // namespace cascade
