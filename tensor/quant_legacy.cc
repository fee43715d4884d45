// Reference (de)quantization of the 32-element types with a minimum or a fifth bit (Q4_1,
// Q5_0, Q5_1), written from the ggml block formats described in quant.h. Dequantization
// computes each element as the format defines it (one float multiply, then the min's add);
// quantization follows ggml's reference algorithms.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "tensor/quant_fit.h"

#include "tensor/quant.h"
#include "util/fp16.h"

namespace cascade {
namespace {

// Code of element j of a 32-element block's nibbles (low nibbles first, then high).
inline int Nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }

// Min and max of one block.
void MinMax(const float* x, int n, float* min, float* max) {
  *min = FLT_MAX;
  *max = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    *min = std::min(*min, x[j]);
    *max = std::max(*max, x[j]);
  }
}

// Packs 32 codes (0..31) of a 5-bit block: low nibbles into qs, fifth bits into qh.
void PackFiveBits(const int* q, uint8_t* qs, uint8_t* qh) {
  std::memset(qh, 0, 4);
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
  for (int j = 0; j < 32; ++j) qh[j / 8] |= static_cast<uint8_t>(((q[j] >> 4) & 1) << (j % 8));
}

// Asymmetric codes 0..nmax of one 32-element block from its min and max (Q4_1, Q5_1):
// d = (max - min) / nmax, code = trunc((x - min) / d + 0.5).
void FitMin(const float* x, int nmax, uint16_t* d_out, uint16_t* m_out, int* q) {
  float min, max;
  MinMax(x, kQK, &min, &max);
  const float d = (max - min) / nmax;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  *d_out = FloatToFp16(d);
  *m_out = FloatToFp16(min);
  for (int j = 0; j < kQK; ++j) {
    q[j] = std::clamp(static_cast<int>((x[j] - min) * id + 0.5f), 0, nmax);
  }
}

}  // namespace

void DequantizeQ4_1(const BlockQ4_1* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFloat(x[i].d), m = Fp16ToFloat(x[i].m);
    for (int j = 0; j < kQK; ++j) *y++ = static_cast<float>(Nibble(x[i].qs, j)) * d + m;
  }
}

void DequantizeQ5_0(const BlockQ5_0* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFloat(x[i].d);
    for (int j = 0; j < kQK; ++j) {
      *y++ = static_cast<float>((Nibble(x[i].qs, j) | Q5HighBit(x[i].qh, j)) - 16) * d;
    }
  }
}

void DequantizeQ5_1(const BlockQ5_1* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float d = Fp16ToFloat(x[i].d), m = Fp16ToFloat(x[i].m);
    for (int j = 0; j < kQK; ++j) {
      *y++ = static_cast<float>(Nibble(x[i].qs, j) | Q5HighBit(x[i].qh, j)) * d + m;
    }
  }
}

void QuantizeQ4_1(const float* x, int64_t n, BlockQ4_1* y) {
  int q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    FitMin(x, 15, &y[i].d, &y[i].m, q);
    for (int j = 0; j < 16; ++j) y[i].qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
  }
}

void QuantizeQ5_0(const float* x, int64_t n, BlockQ5_0* y) {
  int q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    const float max = quant_internal::SignedAbsMax(x, kQK);
    const float d = max / -16;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[i].d = FloatToFp16(d);
    for (int j = 0; j < kQK; ++j) {
      q[j] = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
    }
    PackFiveBits(q, y[i].qs, y[i].qh);
  }
}

void QuantizeQ5_1(const float* x, int64_t n, BlockQ5_1* y) {
  int q[kQK];
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    FitMin(x, 31, &y[i].d, &y[i].m, q);
    PackFiveBits(q, y[i].qs, y[i].qh);
  }
}

}  // namespace cascade
