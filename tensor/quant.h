// Block formats of the quantized weight types (GGUF/ggml layouts) and their reference
// (plain C++) quantization and dequantization.
//
// Contract: pure functions, thread-safe. `n` is always a multiple of the type's block size
// (callers check with RowBytes). Dequantization is exact (bit for bit what ggml produces);
// quantization produces valid encodings (scales finite, codes in range) that follow ggml's
// reference algorithms. These are the references the SIMD kernels are tested against.
#ifndef CASCADE_TENSOR_QUANT_H_
#define CASCADE_TENSOR_QUANT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tensor/tensor_type.h"

namespace cascade {

constexpr int kQK = 32;    // elements per Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 block
constexpr int kQKK = 256;  // elements per K-quant super-block

struct BlockQ4_0 {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // element j in low nibble of qs[j], j+16 in the high nibble; value (q-8)*d
};
struct BlockQ4_1 {
  uint16_t d;      // fp16 scale
  uint16_t m;      // fp16 minimum
  uint8_t qs[16];  // nibbles as in Q4_0; value q*d + m
};
struct BlockQ5_0 {
  uint16_t d;      // fp16 scale
  uint8_t qh[4];   // fifth bits: element j takes bit j of this little-endian uint32
  uint8_t qs[16];  // low 4 bits as in Q4_0; value (q-16)*d
};
struct BlockQ5_1 {
  uint16_t d;      // fp16 scale
  uint16_t m;      // fp16 minimum
  uint8_t qh[4];   // as Q5_0
  uint8_t qs[16];  // as Q5_0; value q*d + m
};
struct BlockQ8_0 {
  uint16_t d;     // fp16 scale
  int8_t qs[32];  // value q*d
};
// K-quants: element e = 128h + 32j + l (h half, j 0..3, l 0..31) of a super-block takes the
// 2 bits at 2j of qs[32h + l], and sub-block (16 elements) 8h + 2j + l/16.
struct BlockQ2K {
  uint8_t scales[16];  // per sub-block: 4-bit scale (low nibble), 4-bit min (high nibble)
  uint8_t qs[64];      // 2-bit codes; value d*scale*q - dmin*min
  uint16_t d;          // fp16 super-block scale of the scales
  uint16_t dmin;       // fp16 super-block scale of the mins
};
struct BlockQ3K {
  uint8_t hmask[32];   // third bit: element e takes bit e/32 of hmask[e % 32]; clear = -4
  uint8_t qs[64];      // low 2 bits as Q2_K; code q in -4..3
  uint8_t scales[12];  // 16 6-bit scales (GetScaleQ3K), stored + 32
  uint16_t d;          // fp16; value d*(scale-32)*q
};
struct BlockQ4K {
  uint16_t d;          // fp16 super-block scale of the 6-bit sub-block scales
  uint16_t dmin;       // fp16 super-block scale of the 6-bit sub-block mins
  uint8_t scales[12];  // 8 (scale, min) pairs, 6 bits each
  uint8_t qs[128];     // 4-bit codes; sub-block s: qs[32*(s/2) + l], low nibble if s even
};
struct BlockQ5K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];  // fifth bit: element 32*s + l takes bit s of qh[l]
  uint8_t qs[128];
};
struct BlockQ6K {
  uint8_t ql[128];    // low 4 bits
  uint8_t qh[64];     // high 2 bits
  int8_t scales[16];  // one per 16 elements
  uint16_t d;         // fp16, stored last
};
// IQ4_NL and IQ4_XS: 4-bit indices into one non-uniform table of int8 levels (denser near
// zero, where weights are), value d * kIq4Levels[q].
inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};
struct BlockIQ4NL {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // indices as Q4_0's nibbles; value d * kIq4Levels[q]
};
struct BlockIQ4XS {  // 256 elements in 8 sub-blocks of 32
  uint16_t d;           // fp16 super-block scale
  uint16_t scales_h;    // sub-block s: high 2 bits of its 6-bit scale at bit 2s
  uint8_t scales_l[4];  // sub-block s: low 4 bits in nibble s%2 of scales_l[s/2]
  uint8_t qs[128];      // sub-block s: qs[16s..16s+16), as one IQ4_NL block's
};                      // value d * (scale(s) - 32) * kIq4Levels[q]
struct BlockQ8K {  // activation format for K-quant dot products (never stored in files)
  float d;
  int8_t qs[256];
  int16_t bsums[16];  // sums of each 16 consecutive qs
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ2K) == 84);
static_assert(sizeof(BlockQ3K) == 110);
static_assert(sizeof(BlockQ4K) == 144);
static_assert(sizeof(BlockQ5K) == 176);
static_assert(sizeof(BlockQ6K) == 210);
static_assert(sizeof(BlockQ8K) == 292);
static_assert(sizeof(BlockIQ4NL) == 18);
static_assert(sizeof(BlockIQ4XS) == 136);

// The 6-bit scale (0..63, stored + 32) of sub-block s (0..7) of an IQ4_XS block.
inline int Iq4XsScale(const BlockIQ4XS& b, int s) {
  return ((b.scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((b.scales_h >> (2 * s)) & 3) << 4);
}

// The 6-bit (scale, min) pair j (0..7) of a Q4_K/Q5_K block.
inline void GetScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Scale i (0..15) of a Q3_K block, minus its offset 32: low 4 bits in the nibble i/8 of
// scales[i % 8], high 2 bits at 2*(i/4) of scales[8 + i % 4].
inline int GetScaleQ3K(int i, const uint8_t* s) {
  const int lo = (s[i % 8] >> (4 * (i / 8))) & 0xF;
  const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

// All 16 scales of a Q3_K block at once, still + 32: byte i of out (little-endian words)
// is scale i as GetScaleQ3K reads it. Low nibbles from bytes 0-7 (scales 0-7 low halves,
// 8-15 high halves), the high pairs of scale i at bits 2 (i / 4) of byte 8 + i % 4, moved
// to bits 4-5.
inline void Q3KScaleWords(const uint8_t* s, uint32_t out[4]) {
  uint32_t a, c, e;  // little-endian, as every GGUF file
  std::memcpy(&a, s, 4);
  std::memcpy(&c, s + 4, 4);
  std::memcpy(&e, s + 8, 4);
  const uint32_t lo = 0x0F0F0F0Fu, hi = 0x30303030u;
  out[0] = (a & lo) | ((e << 4) & hi);
  out[1] = (c & lo) | ((e << 2) & hi);
  out[2] = ((a >> 4) & lo) | (e & hi);
  out[3] = ((c >> 4) & lo) | ((e >> 2) & hi);
}

// The fifth bit of element j (0..31) of a Q5_0/Q5_1 block, as 0 or 16.
inline int Q5HighBit(const uint8_t* qh, int j) { return ((qh[j / 8] >> (j % 8)) & 1) << 4; }

// Dequantizes n elements of any type in {F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS}. Returns false for other types.
bool DequantizeRow(TensorType type, const void* src, int64_t n, float* dst);

void DequantizeQ4_0(const BlockQ4_0* x, int64_t n, float* y);
void DequantizeQ8_0(const BlockQ8_0* x, int64_t n, float* y);
void DequantizeQ4_1(const BlockQ4_1* x, int64_t n, float* y);
void DequantizeQ5_0(const BlockQ5_0* x, int64_t n, float* y);
void DequantizeQ5_1(const BlockQ5_1* x, int64_t n, float* y);
void DequantizeQ2K(const BlockQ2K* x, int64_t n, float* y);
void DequantizeQ3K(const BlockQ3K* x, int64_t n, float* y);
void DequantizeQ4K(const BlockQ4K* x, int64_t n, float* y);
void DequantizeQ5K(const BlockQ5K* x, int64_t n, float* y);
void DequantizeQ6K(const BlockQ6K* x, int64_t n, float* y);
void DequantizeIQ4NL(const BlockIQ4NL* x, int64_t n, float* y);
void DequantizeIQ4XS(const BlockIQ4XS* x, int64_t n, float* y);

// Reference quantizers (float -> blocks).
void QuantizeQ8_0(const float* x, int64_t n, BlockQ8_0* y);
void QuantizeQ4_0(const float* x, int64_t n, BlockQ4_0* y);
void QuantizeQ4_1(const float* x, int64_t n, BlockQ4_1* y);
void QuantizeQ5_0(const float* x, int64_t n, BlockQ5_0* y);
void QuantizeQ5_1(const float* x, int64_t n, BlockQ5_1* y);
void QuantizeQ2K(const float* x, int64_t n, BlockQ2K* y);
void QuantizeQ3K(const float* x, int64_t n, BlockQ3K* y);
// IQ4_NL / IQ4_XS: per 32 elements, the scale (and the indices nearest to x / scale) of
// least squared error among scales that map one of the block's extremes to a level.
void QuantizeIQ4NL(const float* x, int64_t n, BlockIQ4NL* y);
void QuantizeIQ4XS(const float* x, int64_t n, BlockIQ4XS* y);
void QuantizeQ8K(const float* x, int64_t n, BlockQ8K* y);
void QuantizeQ4K(const float* x, int64_t n, BlockQ4K* y);
void QuantizeQ5K(const float* x, int64_t n, BlockQ5K* y);
void QuantizeQ6K(const float* x, int64_t n, BlockQ6K* y);

// Quantizes n floats into `type` (F32, F16, BF16 or one of the quantized types above).
// Returns false for an unsupported type. dst must hold RowBytes(type, n) bytes.
bool QuantizeRow(TensorType type, const float* src, int64_t n, void* dst);

}  // namespace cascade

#endif  // CASCADE_TENSOR_QUANT_H_
