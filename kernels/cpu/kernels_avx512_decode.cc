// AVX-512 VNNI decode kernels (avx512_decode.h): quantized weights x quantized activations
// for 1 to 7 (Q8_0 / Q4_0) or 1 to 15 (K-quants) tokens, reading the weight rows in place.
//
// Why: at decode the AVX2 kernels spend more instructions per weight byte than a core
// can stream from memory (measured on Zen 4, in L2: AVX2 Q4_0 ~17 GB/s of weights, this
// kernel ~30; horizontal adds and scale conversions per 4-row tile are most of the
// difference). Here 16 rows are one group: their per-block (per-super-block) exact integer
// sums are reduced into the 16 int32 lanes of one register by a shuffle tree, and every
// float step after that (scales, conversion, FMA) is one instruction for 16 outputs.
//
// Q8_0 / Q4_0 (and the other 32-element types, QuantCodes; per block b, each of the T tokens):
// - register j (j = 0..3) holds 16 bytes of code of rows 4q + j in its 128-bit chunk q;
//   Q4_0: low nibbles (elements 0..15) and high nibbles (16..31) of those 16 bytes, both
//   unsigned (code + 8); Q8_0: the first and the second 16 codes, made unsigned (+ 128).
//   Two vpdpbusd against the token's codes 0..15 and 16..31 (broadcast to every chunk)
//   leave each row's sum in the 4 lanes of its chunk;
// - a shuffle tree adds each chunk's 4 lanes (Tree4): lane r = row r's sum, to which the
//   token's -8 sum(x) (Q4_0) or -128 sum(x) (Q8_0) is added: S_b exactly;
// - the rows' fp16 scales, assembled in general registers (Scales16), and acc = fma(S_b,
//   d_w * d_x, acc), as the AVX2 kernels do, block after block.
// K-quants (per super-block, each token):
// - per row, 16 int32 lanes of scaled code products: the 128 code bytes as two registers,
//   their nibbles as four (each half a register one 32-element sub-block; Q5_K adds the
//   fifth bit, Q6_K the two high bits; Q2_K / Q3_K: 2-bit codes, Q3_K's third bit), times
//   the token's codes arranged to match (vpmaddubsw, int16 pairs), times the sub-block
//   scales (vpdpwssd). Q4_K / Q5_K / Q2_K fold these into 8 lanes and put the min products
//   (sub-block mins times the token's sums of 32 codes, Q2_K: of 16) into 4 more; Q6_K /
//   Q3_K subtract their -32 / -4 offset term (scales times bsums);
// - a tree over the 16 rows (RowTree) reduces each row's lanes into lane r: S (and M)
//   exactly;
// - then AVX2's float steps per super-block: acc = fma(S, d * dx, acc), acc = fma(-M,
//   dmin * dx, acc) (Q6_K: acc = fma(S - M, d * dx, acc)).
// Integer sums are exact whatever their grouping, and the float steps are the AVX2 ones
// in the same order, so every output is bit for bit the AVX2 kernel's.
//
// No gathers: vpgatherdd of 16 lanes measured ~18 cycles on Zen 4, as much as the rest
// of a Q4_0 block step; the scales come through general registers instead. The weights
// of the next group are prefetched into L2 during this one (a linear sweep: 16
// interleaved row streams are more than the hardware prefetcher follows).
//
// Compiled for AVX-512 F/BW/VL/DQ + VNNI in one region after every include (isa_target.h).

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx512_decode.h"
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/with_width.h"
#include "tensor/quant.h"
#include "tensor/tensor_type.h"

CASCADE_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi2")

#include "kernels/cpu/avx512_quant_util.h"

namespace cascade::cpu::avx512 {
namespace {

constexpr int kGroup = 16;  // weight rows per group: one per float lane
// The group prefetched during a group: this many groups ahead. Measured on Zen 4, one
// thread, Q4_0 74 MB (3 rounds, GB/s): no prefetch 7.5-8.2, 1 group ahead into L1 10-11,
// into L2 13-18, 2 ahead 15.5-20.6 (3 and 4 ahead within the noise of 2).
constexpr int64_t kGroupsAhead = 2;

// A later group of rows is prefetched into L2 during this one. (Into L1 it would evict the
// current one: two groups of 16 K-quant rows are 36 KiB.)
constexpr CacheLevel kAheadLevel = CacheLevel::kL2;

// The rows a range's first groups (or tiles) read before their own prefetch starts: all
// requested at once on entry, rows [r0, min(r1, r0 + rows)) (a decode matmul split over
// threads runs many short ranges).
inline void PrefetchStart(const MatmulTask& t, int64_t rows) {
  const int64_t end = t.r1 - t.r0 < rows ? t.r1 : t.r0 + rows;
  PrefetchBytes<kAheadLevel>(t.w + t.r0 * t.w_stride, (end - t.r0) * t.w_stride);
}

// 16 x 4 bytes -> 16 fp16 values (the low halves of the 32-bit lanes) as floats.
CASCADE_HOT __m512 Fp16Lanes(__m512i v) {
  return _mm512_cvtph_ps(_mm512_maskz_cvtepi32_epi16(static_cast<__mmask16>(0xFFFF), v));
}

// (The zero-masking forms: gcc 12 warns falsely about the plain ones' undefined source.)
CASCADE_HOT __m512 ToFloat(__m512i v) {
  return _mm512_maskz_cvtepi32_ps(static_cast<__mmask16>(0xFFFF), v);
}

// The group's rows [r, r + 16) for rows [r, r1) of a range (a last, partial group is
// moved down to end at r1, its lower rows masked off): first row and output mask.
struct Group {
  int64_t first;
  __mmask16 keep;
};
inline Group GroupAt(int64_t r, int64_t r1) {
  if (r1 - r >= kGroup) return {r, static_cast<__mmask16>(0xFFFF)};
  const int64_t first = r1 - kGroup;
  return {first, static_cast<__mmask16>((0xFFFFu << (r - first)) & 0xFFFFu)};
}

// Hides p's value from the optimizer: addresses off p then stay register + register (or
// + 2 * register) forms instead of one precomputed offset per row, which would not fit in
// the general registers.
CASCADE_HOT const uint8_t* Opaque(const uint8_t* p) {
  __asm__("" : "+r"(p));
  return p;
}

// ---------------------------------------------------------------------------------------
// Q8_0 / Q4_0

// 16 bytes at p[q] + off into 128-bit chunk q (q = 0..3): pairs into 256-bit halves first
// (half-width inserts cost half a 512-bit one on Zen 4).
CASCADE_HOT __m512i Load4x16(const uint8_t* const* p, size_t off) {
  auto load = [&](int q) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[q] + off)); };
  const __m256i a = _mm256_inserti128_si256(_mm256_castsi128_si256(load(0)), load(1), 1);
  const __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(load(2)), load(3), 1);
  return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

// The fp16 scales at p[q] + j * stride (j = 0..3; off3 = 3 * stride) as floats, lane
// 4q + j: assembled in general registers (a gather of 16 lanes costs ~18 cycles on Zen 4,
// these ~3 on ports the vector code leaves idle).
CASCADE_HOT __m512 Scales16(const uint8_t* const* p, size_t stride, size_t off3) {
  uint64_t g[4];
  for (int q = 0; q < 4; ++q) {
    uint16_t h[4];
    std::memcpy(&h[0], p[q], 2);
    std::memcpy(&h[1], p[q] + stride, 2);
    std::memcpy(&h[2], p[q] + 2 * stride, 2);
    std::memcpy(&h[3], p[q] + off3, 2);
    g[q] = h[0] | (uint64_t{h[1]} << 16) | (uint64_t{h[2]} << 32) | (uint64_t{h[3]} << 48);
  }
  const __m128i lo = _mm_unpacklo_epi64(_mm_cvtsi64_si128(static_cast<int64_t>(g[0])),
                                        _mm_cvtsi64_si128(static_cast<int64_t>(g[1])));
  const __m128i hi = _mm_unpacklo_epi64(_mm_cvtsi64_si128(static_cast<int64_t>(g[2])),
                                        _mm_cvtsi64_si128(static_cast<int64_t>(g[3])));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
}

// a[j]: chunk q holds 4 partial sums of row 4q + j. Returns lane r = row r's total:
// adjacent pairs of lanes interleaved, then pairs of pairs.
CASCADE_HOT __m512i Tree4(const __m512i* a) {
  const __m512i t0 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
  const __m512i t1 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
}

// A token's block as the kernel reads it: the codes, the scale as float and the integer S
// starts from (-8 sum(x) for Q4_0, -128 sum(x) for Q8_0). Kept (block, token), so that one
// pointer per block reaches every token.
struct Q8TokenBlock {
  int8_t qs[32];
  float d;
  int32_t base;
  float sum;  // sum(x) as float: what a Q4_1 / Q5_1 minimum multiplies
};


// The weight blocks QuantGroup reads: Q8_0 (signed codes, made unsigned by flipping the
// top bit), Q4_0 (nibbles u = code + 8), IQ4_NL (nibbles, looked up as level + 128; laid
// out as Q4_0) or IQ4_XS (the same per 32 elements, inside 256-element super-blocks with
// a scale per 32); Q5_0 (nibbles and a fifth bit, u = code + 16); Q4_1 / Q5_1 (u with a
// minimum: value u d + m). The unsigned weights' offset (128, 8, 128, 128, 16) times
// sum(x) is subtracted through the token's base; a minimum adds fma(sum(x), m_w d_x) after
// the block's fma, as the AVX2 kernel (kernels_avx2_legacy.cc) does.
enum class QuantCodes { kQ8_0, kQ4_0, kIq4Nl, kIq4Xs, kQ4_1, kQ5_0, kQ5_1 };

// Where a block's parts lie, per type.
template <QuantCodes kCodes>
struct QuantBlockLayout {
  static constexpr bool kMin = kCodes == QuantCodes::kQ4_1 || kCodes == QuantCodes::kQ5_1;
  static constexpr bool kFifthBit = kCodes == QuantCodes::kQ5_0 || kCodes == QuantCodes::kQ5_1;
  // Bytes of a row per 32 elements (IQ4_XS: a super-block's share).
  static constexpr size_t kBytes = kCodes == QuantCodes::kQ8_0   ? sizeof(BlockQ8_0)
                                   : kCodes == QuantCodes::kIq4Xs ? sizeof(BlockIQ4XS) * kQK / kQKK
                                   : kCodes == QuantCodes::kQ4_1  ? sizeof(BlockQ4_1)
                                   : kCodes == QuantCodes::kQ5_0  ? sizeof(BlockQ5_0)
                                   : kCodes == QuantCodes::kQ5_1  ? sizeof(BlockQ5_1)
                                                                  : sizeof(BlockQ4_0);
  // Offsets of the codes (IQ4_XS: of sub-block 0, past its super-block's head), the fifth
  // bits and the fp16 minimum.
  static constexpr size_t kCodesAt = kCodes == QuantCodes::kIq4Xs ? 8
                                     : kCodes == QuantCodes::kQ4_1 ? offsetof(BlockQ4_1, qs)
                                     : kCodes == QuantCodes::kQ5_0 ? offsetof(BlockQ5_0, qs)
                                     : kCodes == QuantCodes::kQ5_1 ? offsetof(BlockQ5_1, qs)
                                                                   : 2;
  static constexpr size_t kHighAt =
      kCodes == QuantCodes::kQ5_1 ? offsetof(BlockQ5_1, qh) : offsetof(BlockQ5_0, qh);
  static constexpr size_t kMinAt = offsetof(BlockQ4_1, m);
  static_assert(offsetof(BlockQ4_1, m) == offsetof(BlockQ5_1, m));
  // The token's base: -offset * sum(x).
  static constexpr int32_t kOffset = kCodes == QuantCodes::kQ4_0   ? 8
                                     : kCodes == QuantCodes::kQ5_0 ? 16
                                     : kMin                        ? 0
                                                                   : 128;
};

// The fifth bits of rows 4q + j (q = 0..3, their blocks at p[q] + off) as two byte masks in
// the layout of the code registers: bit 16q + e of lo for element e < 16 of row 4q + j,
// of hi for element 16 + e.
CASCADE_HOT void FifthBitMasks(const uint8_t* const* p, size_t off, __mmask64* lo,
                               __mmask64* hi) {
  uint64_t l = 0, h = 0;
  for (int q = 0; q < 4; ++q) {
    uint32_t bits;
    std::memcpy(&bits, p[q] + off, 4);
    l |= uint64_t{bits & 0xFFFFu} << (16 * q);
    h |= uint64_t{bits >> 16} << (16 * q);
  }
  *lo = _cvtu64_mask64(l);
  *hi = _cvtu64_mask64(h);
}

// IQ4_XS: the 16 rows' scales d * (scale - 32) of the 8 sub-blocks of the super-block at
// p[q] + j * stride (lane 4q + j), as the AVX2 kernel computes them (float(d) times the
// 6-bit scale minus 32).
CASCADE_HOT void Iq4XsScales16(const uint8_t* const* p, size_t stride, size_t off3,
                               __m512* out) {
  alignas(64) uint32_t head[16], low[16];  // d | scales_h << 16; scales_l
  for (int q = 0; q < 4; ++q) {
    for (int j = 0; j < 4; ++j) {
      const uint8_t* row = p[q] + (j == 3 ? off3 : j * stride);
      std::memcpy(&head[4 * q + j], row, 4);
      std::memcpy(&low[4 * q + j], row + 4, 4);
    }
  }
  const __m512i h = _mm512_load_si512(head), l = _mm512_load_si512(low);
  const __m512 d = Fp16Lanes(h);
  const __m512i high = _mm512_srli_epi32(h, 16);
  for (int s = 0; s < 8; ++s) {
    const __m512i lo4 = _mm512_and_si512(_mm512_srli_epi32(l, 4 * s), _mm512_set1_epi32(0xF));
    const __m512i hi2 =
        _mm512_and_si512(_mm512_srli_epi32(high, 2 * s), _mm512_set1_epi32(3));
    const __m512i ls = _mm512_or_si512(lo4, _mm512_slli_epi32(hi2, 4));
    out[s] = _mm512_mul_ps(d, ToFloat(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))));
  }
}

// One group of 16 rows (w: row 0 of the group) x T tokens over nb blocks (x: T tokens of
// each block, blocks `xs` apart).
template <QuantCodes kCodes, int T>
void QuantGroup(const uint8_t* w, size_t stride, int64_t nb, const Q8TokenBlock* x,
                int64_t xs, float* y, int64_t ldy, __mmask16 keep, const uint8_t* pf) {
  using L = QuantBlockLayout<kCodes>;
  constexpr bool kQ8 = kCodes == QuantCodes::kQ8_0;
  constexpr bool kXs = kCodes == QuantCodes::kIq4Xs;
  constexpr size_t kBlock = L::kBytes;
  static_assert(sizeof(BlockIQ4NL) == sizeof(BlockQ4_0));
  const __m512i sixteen = _mm512_set1_epi8(16);
  __m512 xs_scales[8];  // IQ4_XS: the current super-block's
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  // IQ4_NL: level + 128 (1..241) for each index, in every 128-bit lane.
  alignas(16) static constexpr auto kLevels128 = [] {
    std::array<uint8_t, 16> a{};
    for (int i = 0; i < 16; ++i) a[i] = static_cast<uint8_t>(kIq4Levels[i] + 128);
    return a;
  }();
  const __m512i levels =
      _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kLevels128.data())));
  const size_t s3 = 3 * stride, s4 = 4 * stride;
  __m512 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, x += xs) {
    // IQ4_XS: the block's super-block, whose indices for sub-block b % 8 start at byte
    // 8 + 16 (b % 8); the others: the block, its codes after the fp16 scale.
    const uint8_t* blk = kXs ? w + (b / 8) * sizeof(BlockIQ4XS) : w + b * kBlock;
    const size_t codes_at = L::kCodesAt + (kXs ? 16 * static_cast<size_t>(b % 8) : 0);
    if (pf != nullptr) PrefetchBytes<kAheadLevel>(pf + b * kGroup * kBlock, kGroup * kBlock);
    // Rows 4q + j at p[q] + j * stride (offsets 0, s, 2s, 3s): the block's fp16 scale,
    // then its codes.
    const uint8_t* p[4];
    p[0] = Opaque(blk);
    p[1] = Opaque(p[0] + s4);
    p[2] = Opaque(p[1] + s4);
    p[3] = Opaque(p[2] + s4);
    if constexpr (kXs) {
      if (b % 8 == 0) Iq4XsScales16(p, stride, s3, xs_scales);
    }
    __m512i lo[4], hi[4];
    for (int j = 0; j < 4; ++j) {
      const size_t off = (j == 3 ? s3 : j * stride) + codes_at;
      if constexpr (kQ8) {
        lo[j] = _mm512_xor_si512(Load4x16(p, off), flip);
        hi[j] = _mm512_xor_si512(Load4x16(p, off + 16), flip);
      } else {
        const __m512i v = Load4x16(p, off);
        lo[j] = _mm512_and_si512(v, m4);
        hi[j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if constexpr (kCodes == QuantCodes::kIq4Nl || kXs) {
          lo[j] = _mm512_shuffle_epi8(levels, lo[j]);
          hi[j] = _mm512_shuffle_epi8(levels, hi[j]);
        }
        if constexpr (L::kFifthBit) {
          __mmask64 mlo, mhi;
          FifthBitMasks(p, (j == 3 ? s3 : j * stride) + L::kHighAt, &mlo, &mhi);
          lo[j] = _mm512_mask_add_epi8(lo[j], mlo, lo[j], sixteen);
          hi[j] = _mm512_mask_add_epi8(hi[j], mhi, hi[j], sixteen);
        }
      }
    }
    const __m512 wd = kXs ? xs_scales[b % 8] : Scales16(p, stride, s3);
    __m512 wm = _mm512_setzero_ps();
    if constexpr (L::kMin) {
      const uint8_t* pm[4] = {p[0] + L::kMinAt, p[1] + L::kMinAt, p[2] + L::kMinAt,
                              p[3] + L::kMinAt};
      wm = Scales16(pm, stride, s3);
    }
    for (int j = 0; j < T; ++j) {
      const __m512i xlo =
          _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[j].qs)));
      const __m512i xhi =
          _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[j].qs + 16)));
      __m512i a[4];
      for (int q = 0; q < 4; ++q) {
        a[q] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[q], xlo), hi[q],
                                   xhi);
      }
      const __m512i s = _mm512_add_epi32(Tree4(a), _mm512_set1_epi32(x[j].base));
      const __m512 dx = _mm512_set1_ps(x[j].d);
      acc[j] = _mm512_fmadd_ps(ToFloat(s), _mm512_mul_ps(wd, dx), acc[j]);
      if constexpr (L::kMin) {
        acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(x[j].sum), _mm512_mul_ps(wm, dx), acc[j]);
      }
    }
  }
  for (int j = 0; j < T; ++j) _mm512_mask_storeu_ps(y + j * ldy, keep, acc[j]);
}

template <QuantCodes kCodes>
void QuantDecodeOf(const MatmulTask& t) {
  const int64_t nb = t.k / kQK;
  // Scratch: the tokens' blocks, (nb, n).
  auto* x = reinterpret_cast<Q8TokenBlock*>(t.scratch);
  for (int64_t i = 0; i < t.n; ++i) {
    const auto* a = reinterpret_cast<const BlockQ8_0*>(t.x + i * t.x_stride);
    for (int64_t b = 0; b < nb; ++b) {
      Q8TokenBlock& o = x[b * t.n + i];
      std::memcpy(o.qs, a[b].qs, sizeof(o.qs));
      o.d = _cvtsh_ss(a[b].d);
      const int32_t sum = CodeSum(a[b].qs);
      o.base = -QuantBlockLayout<kCodes>::kOffset * sum;
      if constexpr (QuantBlockLayout<kCodes>::kMin) o.sum = static_cast<float>(sum);
    }
  }
  const size_t stride = t.w_stride;
  PrefetchStart(t, kGroupsAhead * kGroup);
  for (int64_t r = t.r0; r < t.r1; r += kGroup) {
    const Group g = GroupAt(r, t.r1);
    const uint8_t* w = t.w + g.first * stride;
    const int64_t ahead = kGroupsAhead * kGroup;
    const uint8_t* pf = r + ahead < t.r1 ? w + ahead * stride : nullptr;
    // More tokens than one pass holds in registers: passes of nearly equal width over the
    // same rows, the later ones reading them from L1/L2. Each token's sums are its own, so
    // the bits do not depend on the passes.
    const int64_t passes = (t.n + kQuantPassTokens - 1) / kQuantPassTokens;
    const int64_t width = (t.n + passes - 1) / passes;
    for (int64_t i = 0; i < t.n; i += width) {
      WithWidth<kQuantPassTokens>(std::min(width, t.n - i), [&]<int T>() {
        QuantGroup<kCodes, T>(w, stride, nb, x + i, t.n, t.y + i * t.ldy + g.first, t.ldy, g.keep,
                           i == 0 ? pf : nullptr);
      });
    }
  }
}

// ---------------------------------------------------------------------------------------
// K-quants

// A token's super-block as the row kernels read it: the 256 codes in the order of the
// weight registers (Q4_K / Q5_K: [0, 32) | [64, 96), [32, 64) | [96, 128), [128, 160) |
// [192, 224), [160, 192) | [224, 256); Q6_K: in order), the sums of each 32 codes
// (Q4_K / Q5_K: what the sub-block mins multiply), the bsums (Q6_K: what its -32 offset
// multiplies) and the scale.
struct alignas(64) KTokenBlock {
  int8_t x[256];
  int16_t sums32[8];
  int16_t bsums[16];
  float d;
};

// Q4_K / Q5_K: the code order of the weight registers, per 64 bytes: [32c, 32c + 32) of
// the token's codes in the lower half, [32c + 64, ...) in the upper (c: see above).
// Q6_K, Q3_K and Q2_K: in order (their registers hold 64 elements each, in order).
template <TensorType kType>
constexpr bool kCodesInOrder =
    kType == TensorType::kQ6_K || kType == TensorType::kQ3_K || kType == TensorType::kQ2_K;
// Q6_K and Q3_K: unsigned codes with the offset (32, 4) times the scales taken out; the
// others a minimum per sub-block.
template <TensorType kType>
constexpr bool kHasMinK = kType != TensorType::kQ6_K && kType != TensorType::kQ3_K;

template <TensorType kType>
void PrepareKToken(const BlockQ8K& x, KTokenBlock* out) {
  if constexpr (kCodesInOrder<kType>) {
    std::memcpy(out->x, x.qs, 256);
  } else {
    static constexpr int kFrom[8] = {0, 64, 32, 96, 128, 192, 160, 224};
    for (int i = 0; i < 8; ++i) std::memcpy(out->x + 32 * i, x.qs + kFrom[i], 32);
  }
  // |sum of 32 codes| <= 32 * 127: fits int16.
  for (int i = 0; i < 8; ++i) {
    out->sums32[i] = static_cast<int16_t>(x.bsums[2 * i] + x.bsums[2 * i + 1]);
  }
  std::memcpy(out->bsums, x.bsums, sizeof(out->bsums));
  out->d = x.d;
}

// pshufb masks: in the lower two 128-bit chunks, int16 element lo of each chunk in every
// word; in the upper two, element hi.
struct alignas(64) WordSelect {
  uint8_t b[64];
};
constexpr WordSelect Select(int lo, int hi) {
  WordSelect s{};
  for (int i = 0; i < 64; ++i) {
    const int e = i < 32 ? lo : hi;
    s.b[i] = static_cast<uint8_t>(2 * e + (i & 1));
  }
  return s;
}
alignas(64) constexpr WordSelect kSelect[4] = {Select(0, 2), Select(1, 3), Select(4, 6),
                                               Select(5, 7)};

// pshufb masks: every word of chunk c takes int16 element 4h + c of its chunk (h = 0, 1).
constexpr WordSelect WordOfChunk(int h) {
  WordSelect s{};
  for (int i = 0; i < 64; ++i) s.b[i] = static_cast<uint8_t>(2 * (4 * h + i / 16) + (i & 1));
  return s;
}
alignas(64) constexpr WordSelect kWordOfChunk[2] = {WordOfChunk(0), WordOfChunk(1)};

CASCADE_HOT __m512i Load512(const void* p) { return _mm512_loadu_si512(p); }
CASCADE_HOT __m512i Bcast256(const void* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// a | (b & c), bitwise.
CASCADE_HOT __m512i OrAnd(__m512i a, __m512i b, __m512i c) {
  return _mm512_ternarylogic_epi32(a, b, c, 0xF8);
}
// Per 256-bit half: int16 shift counts lo (lower half) and hi (upper half).
CASCADE_HOT __m512i HalfCounts(int lo, int hi) {
  return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(lo)),
                            _mm256_set1_epi16(static_cast<int16_t>(hi)), 1);
}

// One weight row's super-block unpacked: four registers of unsigned codes (each half one
// 32-element sub-block, in the order KTokenBlock::x follows), the int16 scale of each
// word, and the min-side weights: Q4_K / Q5_K the 8 sub-block mins (int16), Q2_K its 16,
// Q6_K / Q3_K the 16 scales times the code offset (32, 4).
struct KRow {
  __m512i codes[4];
  __m512i scales[4];
  __m128i mins;           // Q4_K / Q5_K
  __m256i mins16;         // Q2_K
  __m256i offset_scales;  // Q6_K / Q3_K
};

// Register v's int16 scale per word from the 16 sub-block scales (int16) of s16: chunk c
// takes scale 4v + c (Q6_K, Q3_K, Q2_K: 16-element sub-blocks, codes in order). Scales
// 0-7 and 8-15 go to every chunk, then a byte shuffle per register picks the chunk's word.
// Measured on Zen 4 (kernel_bench BM_MatMul n:1, one thread, ms), against one vpermw per
// register: Q6_K 1.97-2.13 against 2.49-2.58; Q2_K 1.55-1.58 against 1.44-1.45 and Q3_K
// 2.19 against 2.09-2.13. Permuting for those two while shuffling for Q6_K measured Q6_K
// at 2.66-2.97, so all three shuffle: Q6_K is the output head of most K-quant files.
CASCADE_HOT void Scales16Words(__m256i s16, __m512i* scales) {
  const __m512i lo = _mm512_broadcast_i32x4(_mm256_castsi256_si128(s16));
  const __m512i hi = _mm512_broadcast_i32x4(_mm256_extracti128_si256(s16, 1));
  const __m512i first = _mm512_load_si512(kWordOfChunk[0].b);
  const __m512i second = _mm512_load_si512(kWordOfChunk[1].b);
  scales[0] = _mm512_shuffle_epi8(lo, first);
  scales[1] = _mm512_shuffle_epi8(lo, second);
  scales[2] = _mm512_shuffle_epi8(hi, first);
  scales[3] = _mm512_shuffle_epi8(hi, second);
}

// Q2_K / Q3_K: the 2-bit codes, register 2h + t holding elements 128h + 64t + [0, 64): the
// bits at 2j of qs[32h + l] for j = 2t (lower half) and 2t + 1 (upper). Q3_K adds 4 where
// bit 4h + j of hmask[l] is set.
template <TensorType kType>
CASCADE_HOT void TwoBitCodes(const uint8_t* qs, const uint8_t* hmask, KRow* u) {
  const __m512i m3 = _mm512_set1_epi8(3);
  const __m512i hm = kType == TensorType::kQ3_K ? Bcast256(hmask) : _mm512_setzero_si512();
  for (int h = 0; h < 2; ++h) {
    const __m512i q = Bcast256(qs + 32 * h);
    for (int t = 0; t < 2; ++t) {
      u->codes[2 * h + t] = _mm512_and_si512(_mm512_srlv_epi16(q, HalfCounts(4 * t, 4 * t + 2)), m3);
      if constexpr (kType == TensorType::kQ3_K) {
        const int j = 4 * h + 2 * t;
        const __m512i bit = _mm512_srlv_epi16(hm, HalfCounts(j, j + 1));
        u->codes[2 * h + t] =
            OrAnd(u->codes[2 * h + t], _mm512_slli_epi16(bit, 2), _mm512_set1_epi8(4));
      }
    }
  }
}

// The 6-bit sub-block scales (*sc) and mins (*m) of a Q4_K / Q5_K super-block as bytes.
CASCADE_HOT void ScaleMinBytesK4(const uint8_t* s, uint64_t* sc, uint64_t* m) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
  const uint32_t m_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
  *sc = (a & 0x3F3F3F3Fu) | (uint64_t{sc_hi} << 32);
  *m = (b & 0x3F3F3F3Fu) | (uint64_t{m_hi} << 32);
}

template <TensorType kType>
CASCADE_HOT void UnpackRow(const uint8_t* blk, KRow* u) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  if constexpr (kType == TensorType::kQ6_K) {
    const auto* b = reinterpret_cast<const BlockQ6K*>(blk);
    const __m512i m30 = _mm512_set1_epi8(0x30);
    for (int h = 0; h < 2; ++h) {
      __m512i l = Load512(b->ql + 64 * h);
      __asm__("" : "+v"(l));  // in a register (see Q4_K below)
      const __m512i qh = Bcast256(b->qh + 32 * h);
      // [j = 4h | 4h + 1]: low nibbles, high bits at qh bits 0-1 | 2-3, moved to 4-5.
      u->codes[2 * h] = OrAnd(_mm512_and_si512(l, m4), _mm512_sllv_epi16(qh, HalfCounts(4, 2)), m30);
      // [j = 4h + 2 | 4h + 3]: high nibbles, qh bits 4-5 | 6-7.
      u->codes[2 * h + 1] = OrAnd(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                  _mm512_srlv_epi16(qh, HalfCounts(0, 2)), m30);
    }
    const __m256i s16 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales)));
    Scales16Words(s16, u->scales);
    u->offset_scales = _mm256_slli_epi16(s16, 5);
  } else if constexpr (kType == TensorType::kQ3_K) {
    const auto* b = reinterpret_cast<const BlockQ3K*>(blk);
    TwoBitCodes<kType>(b->qs, b->hmask, u);
    // Assembled in registers: stored as 4 words and loaded as one vector, the load waited
    // for the stores (no store forwarding), 2.5x the time of a Q2_K row.
    uint32_t w[4];
    Q3KScaleWords(b->scales, w);
    const __m128i words = _mm_setr_epi32(static_cast<int32_t>(w[0]), static_cast<int32_t>(w[1]),
                                         static_cast<int32_t>(w[2]), static_cast<int32_t>(w[3]));
    const __m256i s16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(words, _mm_set1_epi8(32)));
    Scales16Words(s16, u->scales);
    u->offset_scales = _mm256_slli_epi16(s16, 2);
  } else if constexpr (kType == TensorType::kQ2_K) {
    const auto* b = reinterpret_cast<const BlockQ2K*>(blk);
    TwoBitCodes<kType>(b->qs, nullptr, u);
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales));
    const __m128i nib = _mm_set1_epi8(0x0F);
    Scales16Words(_mm256_cvtepu8_epi16(_mm_and_si128(raw, nib)), u->scales);
    u->mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), nib));
  } else {
    const uint8_t* qs = blk + (kType == TensorType::kQ5_K ? 48 : 16);
    __m512i q0 = Load512(qs), q1 = Load512(qs + 64);
    // In registers: left free, gcc 12 stores each to the stack to use it as two memory
    // operands (a store and two loads more per row).
    __asm__("" : "+v"(q0), "+v"(q1));
    u->codes[0] = _mm512_and_si512(q0, m4);
    u->codes[1] = _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4);
    u->codes[2] = _mm512_and_si512(q1, m4);
    u->codes[3] = _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4);
    if constexpr (kType == TensorType::kQ5_K) {
      // Bit s of qh[l] is bit 4 of element 32 s + l: register v holds sub-blocks
      // (lo, hi) = (0, 2), (1, 3), (4, 6), (5, 7).
      const __m512i qh = Bcast256(blk + 16);
      const __m512i m10 = _mm512_set1_epi8(0x10);
      static constexpr int kSub[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
      for (int v = 0; v < 4; ++v) {
        const __m512i bit0 = _mm512_srlv_epi16(qh, HalfCounts(kSub[v][0], kSub[v][1]));
        u->codes[v] = OrAnd(u->codes[v], _mm512_slli_epi16(bit0, 4), m10);
      }
    }
    uint64_t sc, m;
    ScaleMinBytesK4(blk + 4, &sc, &m);
    const __m512i s = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc))));
    for (int v = 0; v < 4; ++v) {
      u->scales[v] = _mm512_shuffle_epi8(s, _mm512_load_si512(kSelect[v].b));
    }
    u->mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(m)));
  }
}

// Row r's 16 int32 lanes for one token, whose sum is its S (Q6_K: S - M). Q4_K / Q5_K put
// the 16 lanes of S products pairwise added into lanes 0-7, the 4 lanes of min products
// (sub-block mins times the token's sums of 32 codes) into lanes 8-11, and zeros into
// 12-15, so that the tree keeps S (128-bit chunks 0-1) apart from M (chunks 2-3).
template <TensorType kType>
CASCADE_HOT __m512i RowLanes(const KRow& u, const KTokenBlock& x) {
  __m512i p = _mm512_setzero_si512();
  for (int v = 0; v < 4; ++v) {
    p = _mm512_dpwssd_epi32(p, _mm512_maddubs_epi16(u.codes[v], Load512(x.x + 64 * v)),
                            u.scales[v]);
  }
  if constexpr (!kHasMinK<kType>) {
    const __m256i m = _mm256_madd_epi16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums)), u.offset_scales);
    return _mm512_sub_epi32(p, _mm512_zextsi256_si512(m));
  } else if constexpr (kType == TensorType::kQ2_K) {
    // The 16 mins times the bsums, in 8 lanes, folded to 4.
    const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(p), _mm512_extracti64x4_epi64(p, 1));
    const __m256i m8 = _mm256_madd_epi16(
        u.mins16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums)));
    const __m128i m4 = _mm_add_epi32(_mm256_castsi256_si128(m8), _mm256_extracti128_si256(m8, 1));
    return _mm512_inserti64x4(_mm512_castsi256_si512(s8), _mm256_zextsi128_si256(m4), 1);
  } else {
    const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(p), _mm512_extracti64x4_epi64(p, 1));
    const __m128i m4 =
        _mm_madd_epi16(u.mins, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.sums32)));
    return _mm512_inserti64x4(_mm512_castsi256_si512(s8), _mm256_zextsi128_si256(m4), 1);
  }
}

// Tree steps: combine the partial sums of two row sets a, b (level 1: single rows, 16
// lanes each; level 2: pairs, 8 lanes each in alternate lanes; levels 3-4: quads and
// octets in whole 128-bit chunks) into one register holding both sets, half as many lanes
// each. After level 4, lane r holds row r's total.
template <int kLevel>
CASCADE_HOT __m512i Combine(__m512i a, __m512i b) {
  if constexpr (kLevel == 1) {
    return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  } else if constexpr (kLevel == 2) {
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
  } else {
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
}

template <TensorType kType>
struct KBlockOf;
template <>
struct KBlockOf<TensorType::kQ4_K> {
  using Type = BlockQ4K;
  static constexpr int kScaleAt = 0;  // 4 bytes ending with fp16 d (and dmin)
};
template <>
struct KBlockOf<TensorType::kQ5_K> {
  using Type = BlockQ5K;
  static constexpr int kScaleAt = 0;
};
template <>
struct KBlockOf<TensorType::kQ6_K> {
  using Type = BlockQ6K;
  static constexpr int kScaleAt = 206;  // scales[14..15], then d
};
template <>
struct KBlockOf<TensorType::kQ3_K> {
  using Type = BlockQ3K;
  static constexpr int kScaleAt = 106;  // scales[10..11], then d
};
template <>
struct KBlockOf<TensorType::kQ2_K> {
  using Type = BlockQ2K;
  static constexpr int kScaleAt = 80;  // d, dmin
};
static_assert(offsetof(BlockQ3K, d) == 108 && offsetof(BlockQ2K, d) == 80);

// Rows kRow .. kRow + 2^kLevel - 1 of the group at super-block *blk (advanced past them,
// `stride` bytes a row), for T tokens (x[j]: token j's prepared super-block): out[j] = their
// combined lanes; each row's 4 bytes at KBlockOf::kScaleAt go to scale_words[row].
template <TensorType kType, int T, int kLevel, int kRow>
CASCADE_HOT void RowTree(const uint8_t*& blk, size_t stride, const KTokenBlock* x,
                    uint32_t* scale_words, __m512i* out) {
  if constexpr (kLevel == 0) {
    std::memcpy(scale_words + kRow, blk + KBlockOf<kType>::kScaleAt, 4);
    KRow u;
    UnpackRow<kType>(blk, &u);
    blk += stride;
    for (int j = 0; j < T; ++j) out[j] = RowLanes<kType>(u, x[j]);
  } else {
    constexpr int kHalf = 1 << (kLevel - 1);
    __m512i a[T], b[T];
    RowTree<kType, T, kLevel - 1, kRow>(blk, stride, x, scale_words, a);
    RowTree<kType, T, kLevel - 1, kRow + kHalf>(blk, stride, x, scale_words, b);
    for (int j = 0; j < T; ++j) out[j] = Combine<kLevel>(a[j], b[j]);
  }
}

// One group of 16 rows x T tokens over nb super-blocks (x: the tokens' prepared blocks,
// block b's at x + b * x_stride).
template <TensorType kType, int T>
void KQuantGroup(const uint8_t* w, size_t stride, int64_t nb, const KTokenBlock* x,
                 int64_t x_stride, float* y, int64_t ldy, __mmask16 keep, const uint8_t* pf) {
  constexpr size_t kBlock = sizeof(typename KBlockOf<kType>::Type);
  constexpr bool kHasMin = kHasMinK<kType>;
  __m512 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, x += x_stride) {
    const uint8_t* row = w + b * kBlock;
    if (pf != nullptr) PrefetchBytes<kAheadLevel>(pf + b * kGroup * kBlock, kGroup * kBlock);
    alignas(64) uint32_t scale_words[kGroup];
    if constexpr (kHasMin) {
      // Rows 0-7 and 8-15 to their 8-row level (chunks: S of rows 0-3, M of rows 0-3, S of
      // rows 4-7, M of rows 4-7), then S and M of all 16 rows in row order.
      __m512i lo[T], hi[T];
      RowTree<kType, T, 3, 0>(row, stride, x, scale_words, lo);
      RowTree<kType, T, 3, 8>(row, stride, x, scale_words, hi);
      const __m512i dd = _mm512_load_si512(scale_words);
      const __m512 d = Fp16Lanes(dd), dmin = Fp16Lanes(_mm512_srli_epi32(dd, 16));
      for (int j = 0; j < T; ++j) {
        const __m512i s = _mm512_shuffle_i32x4(lo[j], hi[j], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512i m = _mm512_shuffle_i32x4(lo[j], hi[j], _MM_SHUFFLE(3, 1, 3, 1));
        const __m512 dx = _mm512_set1_ps(x[j].d);
        acc[j] = _mm512_fmadd_ps(ToFloat(s), _mm512_mul_ps(d, dx), acc[j]);
        acc[j] = _mm512_fnmadd_ps(ToFloat(m), _mm512_mul_ps(dmin, dx), acc[j]);
      }
    } else {
      __m512i s[T];
      RowTree<kType, T, 4, 0>(row, stride, x, scale_words, s);
      const __m512 d = Fp16Lanes(_mm512_srli_epi32(_mm512_load_si512(scale_words), 16));
      for (int j = 0; j < T; ++j) {
        acc[j] = _mm512_fmadd_ps(ToFloat(s[j]), _mm512_mul_ps(d, _mm512_set1_ps(x[j].d)), acc[j]);
      }
    }
  }
  for (int j = 0; j < T; ++j) _mm512_mask_storeu_ps(y + j * ldy, keep, acc[j]);
}

// Tokens per K-quant tile: the tree keeps up to 4 partial sums per token in registers.
constexpr int kKTile = 4;

// The prepared tokens, (nb, n) blocks, fit in ScratchFloats(k) for every n the kernel takes.
static_assert(sizeof(KTokenBlock) * KQuantDecodeMaxTokens(TensorType::kQ6_K) <=
              kQKK * kScratchRowsPerElement * sizeof(float));

template <TensorType kType>
void KQuantDecodeOf(const MatmulTask& t) {
  const int64_t nb = t.k / kQKK;
  // Scratch: the tokens' prepared super-blocks, (nb, n).
  auto* prepared = reinterpret_cast<KTokenBlock*>(t.scratch);
  for (int64_t i = 0; i < t.n; ++i) {
    const auto* x = reinterpret_cast<const BlockQ8K*>(t.x + i * t.x_stride);
    for (int64_t b = 0; b < nb; ++b) PrepareKToken<kType>(x[b], prepared + b * t.n + i);
  }
  const size_t stride = t.w_stride;
  PrefetchStart(t, kGroupsAhead * kGroup);
  for (int64_t r = t.r0; r < t.r1; r += kGroup) {
    const Group g = GroupAt(r, t.r1);
    const uint8_t* w = t.w + g.first * stride;
    const int64_t ahead = kGroupsAhead * kGroup;
    const uint8_t* pf = r + ahead < t.r1 ? w + ahead * stride : nullptr;
    for (int64_t i = 0; i < t.n; i += kKTile) {
      WithWidth<kKTile>(t.n - i < kKTile ? t.n - i : kKTile, [&]<int T>() {
        KQuantGroup<kType, T>(w, stride, nb, prepared + i, t.n, t.y + i * t.ldy + g.first, t.ldy,
                              g.keep, i == 0 ? pf : nullptr);
      });
    }
  }
}

}  // namespace

void QuantDecode(const MatmulTask& t, TensorType type) {
  if (type == TensorType::kQ8_0) {
    QuantDecodeOf<QuantCodes::kQ8_0>(t);
  } else if (type == TensorType::kIQ4_NL) {
    QuantDecodeOf<QuantCodes::kIq4Nl>(t);
  } else if (type == TensorType::kIQ4_XS) {
    QuantDecodeOf<QuantCodes::kIq4Xs>(t);
  } else if (type == TensorType::kQ4_1) {
    QuantDecodeOf<QuantCodes::kQ4_1>(t);
  } else if (type == TensorType::kQ5_0) {
    QuantDecodeOf<QuantCodes::kQ5_0>(t);
  } else if (type == TensorType::kQ5_1) {
    QuantDecodeOf<QuantCodes::kQ5_1>(t);
  } else {
    QuantDecodeOf<QuantCodes::kQ4_0>(t);
  }
}

void KQuantDecode(const MatmulTask& t, TensorType type) {
  switch (type) {
    case TensorType::kQ4_K:
      KQuantDecodeOf<TensorType::kQ4_K>(t);
      return;
    case TensorType::kQ5_K:
      KQuantDecodeOf<TensorType::kQ5_K>(t);
      return;
    case TensorType::kQ3_K:
      KQuantDecodeOf<TensorType::kQ3_K>(t);
      return;
    case TensorType::kQ2_K:
      KQuantDecodeOf<TensorType::kQ2_K>(t);
      return;
    default:
      KQuantDecodeOf<TensorType::kQ6_K>(t);
      return;
  }
}

}  // namespace cascade::cpu::avx512

CASCADE_TARGET_END()
