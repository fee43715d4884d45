// Portable kernels: the reference code path, and the fallback on CPUs without AVX2.
// They follow the canonical reduction order described in kernel_table.h with separate
// multiply and add (no FMA), so they agree with the SIMD paths to rounding.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/kv_block.h"
#include "kernels/cpu/softmax_block.h"
#include "tensor/quant.h"
#include "tensor/quant_iq4.h"
#include "util/fp16.h"

namespace cascade::cpu {
namespace {

struct LoadF32 {
  static float At(const uint8_t* row, int64_t e) {
    float v;
    std::memcpy(&v, row + 4 * e, 4);
    return v;
  }
};
struct LoadF16 {
  static float At(const uint8_t* row, int64_t e) {
    uint16_t h;
    std::memcpy(&h, row + 2 * e, 2);
    return Fp16ToFloat(h);
  }
};
struct LoadBF16 {
  static float At(const uint8_t* row, int64_t e) {
    uint16_t h;
    std::memcpy(&h, row + 2 * e, 2);
    return Bf16ToFloat(h);
  }
};

float DotF32(const float* a, const float* b, int64_t n) {
  float lanes[8] = {};
  for (int64_t e = 0; e < n; ++e) lanes[e % 8] += a[e] * b[e];
  return ReduceLanes8(lanes);
}

template <typename Load>
void MatmulF32Act(const MatmulTask& t) {
  for (int64_t r = t.r0; r < t.r1; ++r) {
    const uint8_t* w = t.w + r * t.w_stride;
    for (int64_t i = 0; i < t.n; ++i) {
      const float* x = reinterpret_cast<const float*>(t.x + i * t.x_stride);
      float lanes[8] = {};
      for (int64_t e = 0; e < t.k; ++e) lanes[e % 8] += Load::At(w, e) * x[e];
      t.y[i * t.ldy + r] = ReduceLanes8(lanes);
    }
  }
}

// Quantized weights with F32 activations: dequantize each row exactly, then dot.
template <TensorType kType>
void MatmulDequantF32(const MatmulTask& t) {
  for (int64_t r = t.r0; r < t.r1; ++r) {
    DequantizeRow(kType, t.w + r * t.w_stride, t.k, t.scratch);
    for (int64_t i = 0; i < t.n; ++i) {
      const float* x = reinterpret_cast<const float*>(t.x + i * t.x_stride);
      t.y[i * t.ldy + r] = DotF32(t.scratch, x, t.k);
    }
  }
}

// Codes of one 32-element block as int8 in natural order: signed for Q8_0, Q4_0 and Q5_0,
// unsigned (0..31) for the types with a minimum (Q4_1, Q5_1), whose value is q*d + m.
inline int Nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4; }
inline void Codes(const BlockQ8_0& b, int8_t* q) { std::memcpy(q, b.qs, 32); }
inline void Codes(const BlockQ4_0& b, int8_t* q) {
  for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(Nibble(b.qs, j) - 8);
}
inline void Codes(const BlockQ5_0& b, int8_t* q) {
  for (int j = 0; j < 32; ++j)
    q[j] = static_cast<int8_t>((Nibble(b.qs, j) | Q5HighBit(b.qh, j)) - 16);
}
inline void Codes(const BlockQ4_1& b, int8_t* q) {
  for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(Nibble(b.qs, j));
}
inline void Codes(const BlockQ5_1& b, int8_t* q) {
  for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(Nibble(b.qs, j) | Q5HighBit(b.qh, j));
}
template <typename Block>
constexpr bool kHasMin = std::is_same_v<Block, BlockQ4_1> || std::is_same_v<Block, BlockQ5_1>;

// 32-element block types x Q8_0 activations: 8 lanes of 4 products per block, each lane
// += sum * (d_w * d_x); for Q4_1/Q5_1 the minimum's term m_w * d_x * sum(x) in one running
// sum, added after the lane reduction.
template <typename Block>
void MatmulQ8_0Act(const MatmulTask& t) {
  const int64_t nb = t.k / kQK;
  int8_t q[32];
  for (int64_t r = t.r0; r < t.r1; ++r) {
    const auto* w = reinterpret_cast<const Block*>(t.w + r * t.w_stride);
    for (int64_t i = 0; i < t.n; ++i) {
      const auto* x = reinterpret_cast<const BlockQ8_0*>(t.x + i * t.x_stride);
      float lanes[8] = {};
      float mins = 0;
      for (int64_t b = 0; b < nb; ++b) {
        Codes(w[b], q);
        const float dx = Fp16ToFloat(x[b].d);
        const float d = Fp16ToFloat(w[b].d) * dx;
        for (int l = 0; l < 8; ++l) {
          int32_t s = 0;
          for (int e = 4 * l; e < 4 * l + 4; ++e) s += q[e] * x[b].qs[e];
          lanes[l] += static_cast<float>(s) * d;
        }
        if constexpr (kHasMin<Block>) {
          int32_t sx = 0;
          for (int e = 0; e < 32; ++e) sx += x[b].qs[e];
          mins += Fp16ToFloat(w[b].m) * dx * static_cast<float>(sx);
        }
      }
      t.y[i * t.ldy + r] = ReduceLanes8(lanes) + mins;
    }
  }
}

// IQ4_NL / IQ4_XS x Q8_0 activations: the levels as signed codes, 8 lanes of 4 products per
// 32-element block, each lane += sum * (scale_w * d_x), as Q8_0.
template <typename Block>
void MatmulIq4Act(const MatmulTask& t) {
  const int64_t nb = t.k / kQK;
  for (int64_t r = t.r0; r < t.r1; ++r) {
    const auto* w = reinterpret_cast<const Block*>(t.w + r * t.w_stride);
    for (int64_t i = 0; i < t.n; ++i) {
      const auto* x = reinterpret_cast<const BlockQ8_0*>(t.x + i * t.x_stride);
      float lanes[8] = {};
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* qs = Iq4Indices(w, b);
        const float d = Iq4Scale(w, b) * Fp16ToFloat(x[b].d);
        for (int l = 0; l < 8; ++l) {
          int32_t s = 0;
          for (int e = 4 * l; e < 4 * l + 4; ++e) s += kIq4Levels[Nibble(qs, e)] * x[b].qs[e];
          lanes[l] += static_cast<float>(s) * d;
        }
      }
      t.y[i * t.ldy + r] = ReduceLanes8(lanes);
    }
  }
}

// Unpacks a K-quant super-block into codes (natural order), a scale per element group and,
// for Q4_K/Q5_K, the sum of min corrections against the activation block.
struct KUnpacked {
  int8_t q[256];
  int32_t scale[16];  // per 16 elements
  float d;            // fp32 super-block scale
  float min_term;     // dmin * sum_j bsums[j] * min[j/2] (Q4_K/Q5_K; Q2_K: min[j]), else 0
};

void Unpack(const BlockQ4K& b, const BlockQ8K& x, KUnpacked* u) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      u->q[64 * c + l] = static_cast<int8_t>(b.qs[32 * c + l] & 0xF);
      u->q[64 * c + 32 + l] = static_cast<int8_t>(b.qs[32 * c + l] >> 4);
    }
  }
  int32_t mins = 0;
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, m;
    GetScaleMinK4(s, b.scales, &sc, &m);
    u->scale[2 * s] = u->scale[2 * s + 1] = sc;
    mins += (x.bsums[2 * s] + x.bsums[2 * s + 1]) * m;
  }
  u->d = Fp16ToFloat(b.d);
  u->min_term = Fp16ToFloat(b.dmin) * static_cast<float>(mins);
}

void Unpack(const BlockQ5K& b, const BlockQ8K& x, KUnpacked* u) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int hi_lo = (b.qh[l] >> (2 * c)) & 1, hi_hi = (b.qh[l] >> (2 * c + 1)) & 1;
      u->q[64 * c + l] = static_cast<int8_t>((b.qs[32 * c + l] & 0xF) + 16 * hi_lo);
      u->q[64 * c + 32 + l] = static_cast<int8_t>((b.qs[32 * c + l] >> 4) + 16 * hi_hi);
    }
  }
  int32_t mins = 0;
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, m;
    GetScaleMinK4(s, b.scales, &sc, &m);
    u->scale[2 * s] = u->scale[2 * s + 1] = sc;
    mins += (x.bsums[2 * s] + x.bsums[2 * s + 1]) * m;
  }
  u->d = Fp16ToFloat(b.d);
  u->min_term = Fp16ToFloat(b.dmin) * static_cast<float>(mins);
}

void Unpack(const BlockQ6K& b, const BlockQ8K&, KUnpacked* u) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    int8_t* q = u->q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      q[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      q[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      q[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      q[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
  for (int g = 0; g < 16; ++g) u->scale[g] = b.scales[g];
  u->d = Fp16ToFloat(b.d);
  u->min_term = 0;
}

void Unpack(const BlockQ2K& b, const BlockQ8K& x, KUnpacked* u) {
  int32_t mins = 0;
  for (int e = 0; e < 256; ++e) {
    u->q[e] = static_cast<int8_t>((b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3);
  }
  for (int g = 0; g < 16; ++g) {
    u->scale[g] = b.scales[g] & 0xF;
    mins += x.bsums[g] * (b.scales[g] >> 4);
  }
  u->d = Fp16ToFloat(b.d);
  u->min_term = Fp16ToFloat(b.dmin) * static_cast<float>(mins);
}

void Unpack(const BlockQ3K& b, const BlockQ8K&, KUnpacked* u) {
  for (int e = 0; e < 256; ++e) {
    const int low = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const int high = (b.hmask[e % 32] >> (e / 32)) & 1;
    u->q[e] = static_cast<int8_t>(low - (high ? 0 : 4));
  }
  for (int g = 0; g < 16; ++g) u->scale[g] = GetScaleQ3K(g, b.scales);
  u->d = Fp16ToFloat(b.d);
  u->min_term = 0;
}

template <typename Block>
void MatmulQ8KAct(const MatmulTask& t) {
  const int64_t nb = t.k / kQKK;
  KUnpacked u;
  for (int64_t r = t.r0; r < t.r1; ++r) {
    const auto* w = reinterpret_cast<const Block*>(t.w + r * t.w_stride);
    for (int64_t i = 0; i < t.n; ++i) {
      const auto* x = reinterpret_cast<const BlockQ8K*>(t.x + i * t.x_stride);
      float lanes[8] = {};
      float mins = 0;
      for (int64_t b = 0; b < nb; ++b) {
        Unpack(w[b], x[b], &u);
        int32_t isum[8] = {};
        for (int e = 0; e < 256; ++e) isum[e % 8] += u.scale[e / 16] * (u.q[e] * x[b].qs[e]);
        const float d = u.d * x[b].d;
        for (int l = 0; l < 8; ++l) lanes[l] += d * static_cast<float>(isum[l]);
        mins += x[b].d * u.min_term;
      }
      t.y[i * t.ldy + r] = ReduceLanes8(lanes) - mins;
    }
  }
}

MatmulFn ScalarMatmul(TensorType type, ActFormat act) {
  if (act == ActFormat::kF32) {
    switch (type) {
      case TensorType::kF32:
        return &MatmulF32Act<LoadF32>;
      case TensorType::kF16:
        return &MatmulF32Act<LoadF16>;
      case TensorType::kBF16:
        return &MatmulF32Act<LoadBF16>;
      default:
        return ForQuantizedType(
            type, [](auto t) -> MatmulFn { return &MatmulDequantF32<decltype(t)::value>; });
    }
  }
  if (act == ActFormat::kQ8_0) {
    if (type == TensorType::kQ8_0) return &MatmulQ8_0Act<BlockQ8_0>;
    if (type == TensorType::kQ4_0) return &MatmulQ8_0Act<BlockQ4_0>;
    if (type == TensorType::kQ4_1) return &MatmulQ8_0Act<BlockQ4_1>;
    if (type == TensorType::kQ5_0) return &MatmulQ8_0Act<BlockQ5_0>;
    if (type == TensorType::kQ5_1) return &MatmulQ8_0Act<BlockQ5_1>;
    if (type == TensorType::kIQ4_NL) return &MatmulIq4Act<BlockIQ4NL>;
    if (type == TensorType::kIQ4_XS) return &MatmulIq4Act<BlockIQ4XS>;
    return nullptr;
  }
  switch (type) {
    case TensorType::kQ2_K:
      return &MatmulQ8KAct<BlockQ2K>;
    case TensorType::kQ3_K:
      return &MatmulQ8KAct<BlockQ3K>;
    case TensorType::kQ4_K:
      return &MatmulQ8KAct<BlockQ4K>;
    case TensorType::kQ5_K:
      return &MatmulQ8KAct<BlockQ5K>;
    case TensorType::kQ6_K:
      return &MatmulQ8KAct<BlockQ6K>;
    default:
      return nullptr;
  }
}

// Activation rows use round-half-to-even (the SIMD paths produce identical blocks).
void QuantizeQ8_0Row(const float* x, int64_t k, void* out) {
  auto* y = static_cast<BlockQ8_0*>(out);
  for (int64_t b = 0; b < k / kQK; ++b, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = FloatToFp16(d);
    for (int j = 0; j < kQK; ++j) y[b].qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
  }
}
void QuantizeQ8KRow(const float* x, int64_t k, void* out) {
  QuantizeQ8K(x, k, static_cast<BlockQ8K*>(out));
}

void Axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
void Scale(float a, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}
float SumSquares(const float* x, int64_t n) {
  float lanes[8] = {};
  for (int64_t e = 0; e < n; ++e) lanes[e % 8] += x[e] * x[e];
  return ReduceLanes8(lanes);
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

// gelu_tanh(g) = 0.5 g (1 + tanh(u)) = g / (1 + exp(-2u)), u = sqrt(2/pi) (g + 0.044715 g^3).
void GeluMul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float minus_2u = g * (kGeluA + kGeluB * (g * g));
    out[i] = g / (1.0f + std::exp(minus_2u)) * up[i];
  }
}

void HalfRowToFloat(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFloat(src[i]);
}

void FloatRowToHalf(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToFp16(x[i]);
}

// One head at a time: scores of a KV block (from the query's first position: a sliding
// window skips what lies before it), then the online-softmax update.
void AttentionQueryGroup(const AttentionParams& p, const AttentionQuery& q, int kvh,
                         float* scratch) {
  const int group = p.n_heads / p.n_kv_heads;
  const int32_t first = p.first_position(q);
  float* scores = scratch;
  float* kv_buf = scratch + static_cast<int64_t>(group) * p.block_size;  // F16 rows as floats
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const float* qh = q.q + static_cast<int64_t>(h) * p.head_dim;
    float* out = q.out + static_cast<int64_t>(h) * p.head_dim;
    std::fill(out, out + p.head_dim, 0.0f);
    float m = -INFINITY, l = 0.0f;
    for (int32_t start = first / p.block_size * p.block_size; start < q.n_ctx;
         start += p.block_size) {
      const int32_t block = q.blocks[start / p.block_size];
      const int count = std::min(p.block_size, q.n_ctx - start);
      const int lo = std::max(0, first - start);
      const KvRows rows = KvBlockRows<&HalfRowToFloat>(p, block, kvh, count, kv_buf);
      float bmax = -INFINITY;
      for (int j = lo; j < count; ++j) {
        scores[j] = DotF32(qh, rows.k + j * rows.stride, p.head_dim) * p.scale;
      }
      SoftCapScores(p.softcap, scores + lo, count - lo);
      for (int j = lo; j < count; ++j) bmax = std::max(bmax, scores[j]);
      const float m_new = std::max(m, bmax);
      const float correction = std::exp(m - m_new);
      if (l > 0) Scale(correction, out, p.head_dim);
      l *= correction;
      for (int j = lo; j < count; ++j) {
        const float w = std::exp(scores[j] - m_new);
        l += w;
        Axpy(w, rows.v + j * rows.stride, out, p.head_dim);
      }
      m = m_new;
    }
    if (l > 0) Scale(1.0f / l, out, p.head_dim);
  }
}

// The reference takes a tile's queries one after another.
void AttentionGroup(const AttentionParams& p, const AttentionQuery* qs, int n, int kvh,
                    float* scratch) {
  for (int i = 0; i < n; ++i) AttentionQueryGroup(p, qs[i], kvh, scratch);
}

}  // namespace

const KernelTable& ScalarKernels() {
  static const KernelTable table{.isa = CpuIsa::kScalar,
                                 .matmul = &ScalarMatmul,
                                 .quantize_q8_0 = &QuantizeQ8_0Row,
                                 .quantize_q8k = &QuantizeQ8KRow,
                                 .dot = &DotF32,
                                 .axpy = &Axpy,
                                 .scale = &Scale,
                                 .sum_squares = &SumSquares,
                                 .silu_mul = &SiluMul,
                                 .gelu_mul = &GeluMul,
                                 .float_to_f16 = &FloatRowToHalf,
                                 .attention_group = &AttentionGroup};  // no packing, no groups
  return table;
}

}  // namespace cascade::cpu
