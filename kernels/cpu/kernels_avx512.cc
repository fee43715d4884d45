// The AVX-512 kernel table: the AVX2 table with the matmuls rewritten for 512-bit
// registers, each bit for bit the AVX2 kernel's results, so that decode, micro-batches and
// prefill still agree on every row:
// - the float GEMM (F32/F16/BF16 weights, more than 16 tokens; gemm_lanes.h): 32-row panels
//   x 12-token tiles, twice the FMA width of AVX2 per instruction;
// - with VNNI, Q8_0 / Q4_0 weights x Q8_0 activations from 17 tokens on, and Q4_K / Q5_K /
//   Q6_K x Q8_K past KQuantDecodeMaxTokens (quant_lanes.h): one vpdpbusd adds 4 products for each
//   of 16 rows, where AVX2 needs two or three instructions for 4 products of 8 rows;
// - decode (avx512_decode.h): with VNNI, Q8_0 / Q4_0 for 1-16 tokens and K-quants for
//   1-16 (Q6_K 1-32; 16 rows reduced into one register's lanes). On Zen 4 the AVX2 quantized
//   decode tiles were bound by instructions, not memory (Q4_0 ~17 GB/s of weights in L2,
//   below a core's ~25-28 GB/s from DRAM), and their 4-8 interleaved row streams defeat the
//   hardware prefetcher.
// - with VNNI, Q8_0 / Q4_0 / Q4_K weights regrouped 16 rows at a time at load (row_groups.h,
//   avx512_grouped.h): every token count, one vpdpbusd per 4 elements of 16 rows (without
//   VNNI the AVX2 table's grouped Q4_0 and Q4_K kernels stay);
// - attention (avx512_attention.h): two heads' scores per register, 16-float outputs.
// - float weights x 3-16 tokens: the AVX2 tiles with two tokens per register (one FMA for
//   two of AVX2's). One or two tokens stay on the AVX2 tiles: they read the rows at the
//   memory's rate, which 512-bit registers do not raise.
//
// Only the kernels' own code is compiled for AVX-512, in two regions after every other
// include (AVX-512 F/BW/VL/DQ for the float GEMM; the same plus VNNI for the integer
// kernels, which run only where the CPU has VNNI; isa_target.h): inline functions of the
// shared headers stay baseline code here, so the linker can never hand an AVX2-only CPU an
// AVX-512 copy of one of them, and an AVX-512 CPU without VNNI never runs code compiled
// for it. The table itself is baseline code.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx512_attention.h"
#include "kernels/cpu/avx512_decode.h"
#include "kernels/cpu/avx512_grouped.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm_layout.h"
#include "kernels/cpu/grouped_token.h"
#include "kernels/cpu/isa_target.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/prefetch.h"
#include "tensor/quant.h"
#include "tensor/tensor_type.h"
#include "util/fp16.h"

CASCADE_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi2")

#include "kernels/cpu/gemm_lanes.h"

namespace cascade::cpu {
namespace {

struct Zmm {
  static constexpr int kWidth = 16;
  static constexpr bool kPairTiles = true;  // 32 registers: two 24-accumulator tiles
  using V = __m512;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void StoreFirst(float* p, V v, int count) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << count) - 1), v);
  }
  static V Splat(const float* p) { return _mm512_set1_ps(*p); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
};

// Float weights x 3-16 tokens: the AVX2 tiles (F32Tile of kernels_avx2.cc) two tokens per
// register. Each 256-bit half of an accumulator is the AVX2 accumulator of one (row,
// token): the row's 8 elements of a step in both halves, token a's 8 activations in the
// low half and token b's in the high, one FMA for both; every half sees the AVX2 tile's
// operands in its order (masked tails: zeros for both, as AVX2's), and is reduced as
// Hsum8 reduces a register, so the bits are AVX2's. Half the FMAs of AVX2 for the same
// products: these sizes are bound by the FMAs, not by the weight rows (one thread, Zen 5,
// F16 4-12 tokens: 75 GFLOP/s on the AVX2 tiles, a third of the 512-bit FMA peak).

// Loaders: a row's elements [e, e + 8) in both halves (ZLoad*::Pair), or its first `count`
// of them and zeros (Partial).
inline __mmask8 Mask8(int64_t count) { return static_cast<__mmask8>((1u << count) - 1); }
struct ZLoadF32 {
  static constexpr int kBytes = 4;
  static __m512 Pair(const uint8_t* row, int64_t e) {
    return _mm512_broadcast_f32x8(_mm256_loadu_ps(reinterpret_cast<const float*>(row) + e));
  }
  static __m512 Partial(const uint8_t* row, int64_t e, int64_t count) {
    return _mm512_broadcast_f32x8(
        _mm256_maskz_loadu_ps(Mask8(count), reinterpret_cast<const float*>(row) + e));
  }
};
// 16-bit floats: 8 of them loaded (or the first `count`, zeros after) and widened into
// both halves by Widen.
template <__m512 (*Widen)(__m128i)>
struct ZLoadHalf {
  static constexpr int kBytes = 2;
  static __m512 Pair(const uint8_t* row, int64_t e) {
    return Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * e)));
  }
  static __m512 Partial(const uint8_t* row, int64_t e, int64_t count) {
    return Widen(_mm_maskz_loadu_epi16(Mask8(count), row + 2 * e));
  }
};
inline __m512 WidenF16(__m128i h) { return _mm512_cvtph_ps(_mm256_broadcastsi128_si256(h)); }
inline __m512 WidenBF16(__m128i h) {
  return _mm512_castsi512_ps(
      _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_broadcastsi128_si256(h)), 16));
}
using ZLoadF16 = ZLoadHalf<&WidenF16>;
using ZLoadBF16 = ZLoadHalf<&WidenBF16>;

// avx2::Hsum8's tree on one 256-bit half: ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)). A copy
// with internal linkage: avx2_util.h's inline Hsum8 compiled in this AVX-512 region could
// be the copy the linker hands the AVX2 files (see the top of this file).
inline float HalfSum(__m256 v) {
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 hi = _mm_movehl_ps(lo, lo);
  lo = _mm_add_ps(lo, hi);
  hi = _mm_shuffle_ps(lo, lo, 1);
  return _mm_cvtss_f32(_mm_add_ss(lo, hi));
}

// The tokens' activations in pairs, step by step: xp[(s * P + p) * 16 + h * 8 + i] = token
// 2p + h's element 8s + i for P = ceil(n / 2) pairs (zeros past k, as AVX2's masked loads
// give; an odd count's last pair repeats its last token), so that each step loads each pair
// with one aligned load. Steps [s0, s1) only: parts of the steps may be packed concurrently.
void PackTokenPairs(const MatmulTask& t, int64_t s0, int64_t s1, float* xp) {
  const int pairs = static_cast<int>((t.n + 1) / 2);
  for (int c = 0; c < 2 * pairs; ++c) {
    const float* x =
        reinterpret_cast<const float*>(t.x + std::min<int64_t>(c, t.n - 1) * t.x_stride);
    float* d = xp + (s0 * pairs + c / 2) * 16 + (c % 2) * 8;
    for (int64_t s = s0; s < s1; ++s, d += pairs * 16) {
      const int64_t e = 8 * s;
      _mm256_store_ps(
          d, e + 8 <= t.k ? _mm256_loadu_ps(x + e) : _mm256_maskz_loadu_ps(Mask8(t.k - e), x + e));
    }
  }
}
int64_t PairSteps(int64_t k) { return (k + 7) / 8; }

// R rows x P token pairs (xp: PackTokenPairs), n real tokens; pf: prefetch distance in
// bytes (into L2).
template <typename L, int R, int P>
void PairTile(const uint8_t* const* w, const float* xp, int n, int64_t k, float* y, int64_t ldy,
              int64_t pf) {
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  }
  auto step = [&](int64_t e, const float* x, bool partial) {
    __m512 xv[P];
    for (int p = 0; p < P; ++p) xv[p] = _mm512_load_ps(x + 16 * p);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = partial ? L::Partial(w[r], e, k - e) : L::Pair(w[r], e);
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(wv, xv[p], acc[r][p]);
    }
  };
  int64_t e = 0;
  const float* x = xp;
  for (; e + 16 <= k; e += 16, x += 2 * 16 * P) {
    if (pf != 0 && e % (64 / L::kBytes) == 0) {  // one prefetch per 64 bytes of each row
      for (int r = 0; r < R; ++r) {
        PrefetchBytes<CacheLevel::kL2>(reinterpret_cast<const char*>(w[r]) + e * L::kBytes + pf,
                                       64);
      }
    }
    step(e, x, false);
    step(e + 8, x + 16 * P, false);
  }
  for (; e + 8 <= k; e += 8, x += 16 * P) step(e, x, false);
  if (e < k) step(e, x, true);
  for (int r = 0; r < R; ++r) {
    for (int p = 0; p < P; ++p) {
      y[2 * p * ldy + r] = HalfSum(_mm512_castps512_ps256(acc[r][p]));
      if (2 * p + 1 < n) y[(2 * p + 1) * ldy + r] = HalfSum(_mm512_extractf32x8_ps(acc[r][p], 1));
    }
  }
}

// All t.n (2P - 1 or 2P) tokens against rows [t.r0, t.r1) in tiles of R rows: each weight
// row is read and widened once, prefetched 4 tiles ahead (as the AVX2 few-token tiles).
// The pairs packed: t.packed_x where the backend packed them once for the matmul's threads
// (PackF32), else here into 16 * P * ceil(k / 8) floats of t.scratch.
template <typename L, int R, int P>
void PairRows(const MatmulTask& t) {
  static_assert(2 * P <= kScratchRowsPerElement, "the packed pairs fit in ScratchFloats(k)");
  const float* xp = t.packed_x;
  if (xp == nullptr) {
    PackTokenPairs(t, 0, PairSteps(t.k), t.scratch);
    xp = t.scratch;
  }
  const int n = static_cast<int>(t.n);
  const int64_t pf = 4 * R * static_cast<int64_t>(t.w_stride);
  const uint8_t* w[R];
  int64_t r = t.r0;
  for (; r + R <= t.r1; r += R) {
    for (int j = 0; j < R; ++j) w[j] = t.w + (r + j) * t.w_stride;
    PairTile<L, R, P>(w, xp, n, t.k, t.y + r, t.ldy, pf);
  }
  for (; r < t.r1; ++r) {
    w[0] = t.w + r * t.w_stride;
    PairTile<L, 1, P>(w, xp, n, t.k, t.y + r, t.ldy, 0);
  }
}

// 3-16 tokens (at most 2 x 8): R x P accumulators (at most 24), the pairs' activations and
// a weight register within 32.
template <typename L>
void FloatFewTokens(const MatmulTask& t) {
  switch ((t.n + 1) / 2) {
    case 2:
      return PairRows<L, 8, 2>(t);
    case 3:
      return PairRows<L, 6, 3>(t);
    case 4:
      return PairRows<L, 6, 4>(t);
    case 5:
      return PairRows<L, 4, 5>(t);
    case 6:
      return PairRows<L, 4, 6>(t);
    case 7:
      return PairRows<L, 3, 7>(t);
    default:
      return PairRows<L, 3, 8>(t);
  }
}

}  // namespace
}  // namespace cascade::cpu

CASCADE_TARGET_END()

CASCADE_TARGET_BEGIN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi2")

#include "kernels/cpu/quant_lanes.h"

namespace cascade::cpu {
namespace {

// 16 int32 lanes with VNNI's byte dot product (the P of quant_lanes.h). Only reached when
// the CPU has AVX512_VNNI.
struct ZmmDot {
  using IV = __m512i;
  using FV = __m512;
  static FV ZeroF() { return _mm512_setzero_ps(); }
  static IV SplatI(int32_t v) { return _mm512_set1_epi32(v); }
  static IV LoadI(const void* p) { return _mm512_loadu_si512(p); }
  static IV Bcast4(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  static IV Dot4(IV acc, IV u, IV s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static void StoreI(int32_t* p, IV v) { _mm512_storeu_si512(p, v); }
  static FV LoadF(const float* p) { return _mm512_loadu_ps(p); }
  static FV SplatF(float v) { return _mm512_set1_ps(v); }
  static FV MulF(FV a, FV b) { return _mm512_mul_ps(a, b); }
  // (The zero-masking form: gcc 12 warns falsely about the plain one's undefined source.)
  static FV CvtF(IV v) { return _mm512_maskz_cvtepi32_ps(static_cast<__mmask16>(0xFFFF), v); }
  static FV Fma(FV a, FV b, FV c) { return _mm512_fmadd_ps(a, b, c); }
  static void StoreFirstF(float* p, FV v, int count) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << count) - 1), v);
  }
  static IV AddI(IV a, IV b) { return _mm512_add_epi32(a, b); }
  static IV SubI(IV a, IV b) { return _mm512_sub_epi32(a, b); }
  static IV MulLoI(IV a, IV b) { return _mm512_mullo_epi32(a, b); }
  static IV Dot2(IV acc, IV a, IV b) { return _mm512_dpwssd_epi32(acc, a, b); }
  static FV Fnma(FV a, FV b, FV c) { return _mm512_fnmadd_ps(a, b, c); }
};

}  // namespace
}  // namespace cascade::cpu

CASCADE_TARGET_END()

namespace cascade::cpu {
namespace {

// A matmul of kMinTokens tokens or more runs Kernel (an AVX-512 kernel above; none: the
// AVX2 kernel there too); up to
// kDecodeMax tokens run Decode (an AVX-512 decode kernel of avx512_decode.h) when there is
// one and the row range allows (it ends at row 16 or later); the rest the AVX2 table's
// kernel (the same bits).
template <TensorType kType, ActFormat kAct, int64_t kMinTokens,
          void (*Kernel)(const MatmulTask&, TensorType), int64_t kDecodeMax = 0,
          void (*Decode)(const MatmulTask&, TensorType) = nullptr>
void ByTokens(const MatmulTask& t) {
  if (Kernel != nullptr && t.n >= kMinTokens) {
    Kernel(t, kType);
  } else if (Decode != nullptr && t.n <= kDecodeMax && t.r1 >= 16) {
    Decode(t, kType);
  } else {
    Avx2Kernels().matmul(kType, kAct)(t);
  }
}

// Float weights: 3 to kPairMaxTokens tokens the token-pair tiles (FloatFewTokens), more the
// GEMM; one or two tokens the AVX2 tiles, which read the rows at the memory's rate (their
// rows per tile chosen by the core). Measured on Zen 5, one thread, F16 2048 x 5632,
// GFLOP/s against the AVX2 tiles / the GEMM in the same minutes: 4 tokens 93-131 against
// 43-47, 8 tokens 131-179 against 47-49, 12 tokens 136-181 against 63-66, 16 tokens
// 127-145 against the GEMM's 86-101 (two threads 218-230 against 183-197); 2 tokens
// 62-76 against 71-79 (bound by the memory).
constexpr int64_t kPairMaxTokens = 16;
template <TensorType kType, typename L>
void FloatMatmul(const MatmulTask& t) {
  if (t.n > kPairMaxTokens) {
    lanes::LaneGemm<Zmm>(t, kType);
  } else if (t.n >= 3) {
    FloatFewTokens<L>(t);
  } else {
    Avx2Kernels().matmul(kType, ActFormat::kF32)(t);
  }
}
// The activations packed once per matmul and shared by its threads: the token pairs for 3
// to kPairMaxTokens tokens, the GEMM's tiles for more. Packed per call instead, each
// 128-row chunk (and each of MatMulShared's weights) packed them again: shared, a step of
// 16 tokens through TinyLlama F16 layers ran 10-13% faster on two threads (measured with
// the repacking skipped, Zen 5: `BM_DecodeLayers` F16 16 tokens 227-250 against 204-224
// GFLOP/s, `BM_MatMul` F16 n:16 257-283 against 227-247).
bool PairsOf(TensorType type, int64_t n) {
  const bool floats =
      type == TensorType::kF32 || type == TensorType::kF16 || type == TensorType::kBF16;
  return floats && n >= 3 && n <= kPairMaxTokens;
}
size_t PackedF32Floats(TensorType type, int64_t n, int64_t k) {
  if (n > kPairMaxTokens) return Avx2Kernels().packed_f32_floats(type, n, k);
  return PairsOf(type, n) ? static_cast<size_t>(16 * ((n + 1) / 2) * PairSteps(k)) : 0;
}
void PackF32(TensorType type, const MatmulTask& t, int part, int parts, float* out) {
  if (t.n > kPairMaxTokens) return Avx2Kernels().pack_f32(type, t, part, parts, out);
  if (!PairsOf(type, t.n)) return;
  const int64_t steps = PairSteps(t.k);
  PackTokenPairs(t, steps * part / parts, steps * (part + 1) / parts, out);
}
// Q8_0 / Q4_0 / Q5_0 / IQ4: the decode kernel up to 16 tokens (a batch of 16 decoding
// sequences), the panels above. Expanding rows into panels costs as much as the dot products at 16 tokens
// (a 16-stream serving profile: 36% of the time in the expansion, 43% in the products).
static_assert(avx512::kQuantDecodeMaxTokens == 16);
template <TensorType kType>
constexpr MatmulFn kDot = &ByTokens<kType, ActFormat::kQ8_0, 17, &dot16::QuantBlocked<ZmmDot>,
                                    16, &avx512::QuantDecode>;
// Q4_1 / Q5_1 and Q2_K / Q3_K: the decode kernel up to 16 tokens, the AVX2 kernel above
// (the panels expand no codes with a minimum, nor 16 scales per super-block). Q5_0 takes
// kDot: its codes u - 16 are signed bytes as Q8_0's.
template <TensorType kType>
constexpr MatmulFn kLegacyDot =
    &ByTokens<kType, ActFormat::kQ8_0, 0, nullptr, 16, &avx512::QuantDecode>;
template <TensorType kType>
constexpr MatmulFn kKLegacyDot =
    &ByTokens<kType, ActFormat::kQ8K, 0, nullptr, 16, &avx512::KQuantDecode>;
// K-quants: the decode kernel up to KQuantDecodeMaxTokens, the panels above.
template <TensorType kType>
constexpr MatmulFn kKDot =
    &ByTokens<kType, ActFormat::kQ8K, avx512::KQuantDecodeMaxTokens(kType) + 1,
              &dot16::KQuantBlocked<ZmmDot>, avx512::KQuantDecodeMaxTokens(kType),
              &avx512::KQuantDecode>;

MatmulFn Avx512Matmul(TensorType type, ActFormat act) {
  if (act == ActFormat::kF32) {
    switch (type) {
      case TensorType::kF32:
        return &FloatMatmul<TensorType::kF32, ZLoadF32>;
      case TensorType::kF16:
        return &FloatMatmul<TensorType::kF16, ZLoadF16>;
      case TensorType::kBF16:
        return &FloatMatmul<TensorType::kBF16, ZLoadBF16>;
      default:
        break;
    }
  }
  return Avx2Kernels().matmul(type, act);
}

// The same, with the VNNI kernels for quantized weights (the table takes this one when the
// CPU has VNNI, decided once).
MatmulFn Avx512VnniMatmul(TensorType type, ActFormat act) {
  if (act == ActFormat::kQ8_0) {
    if (type == TensorType::kQ8_0) return kDot<TensorType::kQ8_0>;
    if (type == TensorType::kQ4_0) return kDot<TensorType::kQ4_0>;
    if (type == TensorType::kIQ4_NL) return kDot<TensorType::kIQ4_NL>;
    if (type == TensorType::kIQ4_XS) return kDot<TensorType::kIQ4_XS>;
    if (type == TensorType::kQ4_1) return kLegacyDot<TensorType::kQ4_1>;
    if (type == TensorType::kQ5_0) return kDot<TensorType::kQ5_0>;
    if (type == TensorType::kQ5_1) return kLegacyDot<TensorType::kQ5_1>;
  }
  if (act == ActFormat::kQ8K) {
    if (type == TensorType::kQ4_K) return kKDot<TensorType::kQ4_K>;
    if (type == TensorType::kQ5_K) return kKDot<TensorType::kQ5_K>;
    if (type == TensorType::kQ6_K) return kKDot<TensorType::kQ6_K>;
    if (type == TensorType::kQ3_K) return kKLegacyDot<TensorType::kQ3_K>;
    if (type == TensorType::kQ2_K) return kKLegacyDot<TensorType::kQ2_K>;
  }
  return Avx512Matmul(type, act);
}

}  // namespace

const KernelTable& Avx512Kernels() {
  static const KernelTable table = [] {
    KernelTable t = Avx2Kernels();
    t.isa = CpuIsa::kAvx512;
    t.matmul = DetectCpuFeatures().avx512vnni ? &Avx512VnniMatmul : &Avx512Matmul;
    t.attention_group = &avx512::AttentionGroup;
    t.packed_f32_floats = &PackedF32Floats;
    t.pack_f32 = &PackF32;
    if (DetectCpuFeatures().avx512vnni) {
      t.groups = &avx512::GroupsType;
      t.grouped_tokens_bytes = &GroupedTokensBytes;
      t.prepare_grouped = &PrepareGroupedTokens;
      t.grouped_matmul = avx512::GroupedMatmulFor(PrefetchGroupedQ4K(DetectCpuFeatures()));
    }
    return t;
  }();
  return table;
}

}  // namespace cascade::cpu
