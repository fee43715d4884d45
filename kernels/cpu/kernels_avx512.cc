// The AVX-512 kernel table: the AVX2 table with the matmuls rewritten for 512-bit
// registers, each bit for bit the AVX2 kernel's results, so that decode, micro-batches and
// prefill still agree on every row:
// - the float GEMM (F32/F16/BF16 weights, 16 tokens and more; gemm_lanes.h): 32-row panels
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
// Float weights below 16 tokens stay on the AVX2 tiles: decode reads two rows at a time at
// the memory's rate, which 512-bit registers do not raise.
//
// Only the kernels' own code is compiled for AVX-512, in two regions after every other
// include (AVX-512 F/BW/VL/DQ for the float GEMM; the same plus VNNI for the integer
// kernels, which run only where the CPU has VNNI; isa_target.h): inline functions of the
// shared headers stay baseline code here, so the linker can never hand an AVX2-only CPU an
// AVX-512 copy of one of them, and an AVX-512 CPU without VNNI never runs code compiled
// for it. The table itself is baseline code.
#include <immintrin.h>

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

// A matmul of kMinTokens tokens or more runs Kernel (an AVX-512 kernel above); up to
// kDecodeMax tokens run Decode (an AVX-512 decode kernel of avx512_decode.h) when there is
// one and the row range allows (it ends at row 16 or later); the rest the AVX2 table's
// kernel (the same bits).
template <TensorType kType, ActFormat kAct, int64_t kMinTokens,
          void (*Kernel)(const MatmulTask&, TensorType), int64_t kDecodeMax = 0,
          void (*Decode)(const MatmulTask&, TensorType) = nullptr>
void ByTokens(const MatmulTask& t) {
  if (t.n >= kMinTokens) {
    Kernel(t, kType);
  } else if (Decode != nullptr && t.n <= kDecodeMax && t.r1 >= 16) {
    Decode(t, kType);
  } else {
    Avx2Kernels().matmul(kType, kAct)(t);
  }
}

// Float weights: the GEMM from kGemmMinTokens tokens on, where the AVX2 GEMM starts; fewer
// tokens (decode included): the AVX2 kernels.
template <TensorType kType>
constexpr MatmulFn kGemm = &ByTokens<kType, ActFormat::kF32, kGemmMinTokens, &lanes::LaneGemm<Zmm>>;
// Q8_0 / Q4_0: the decode kernel up to 16 tokens (a batch of 16 decoding sequences), the
// panels above. Expanding rows into panels costs as much as the dot products at 16 tokens
// (a 16-stream serving profile: 36% of the time in the expansion, 43% in the products).
static_assert(avx512::kQuantDecodeMaxTokens == 16);
template <TensorType kType>
constexpr MatmulFn kDot = &ByTokens<kType, ActFormat::kQ8_0, 17, &dot16::QuantBlocked<ZmmDot>,
                                    16, &avx512::QuantDecode>;
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
        return kGemm<TensorType::kF32>;
      case TensorType::kF16:
        return kGemm<TensorType::kF16>;
      case TensorType::kBF16:
        return kGemm<TensorType::kBF16>;
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
  }
  if (act == ActFormat::kQ8K) {
    if (type == TensorType::kQ4_K) return kKDot<TensorType::kQ4_K>;
    if (type == TensorType::kQ5_K) return kKDot<TensorType::kQ5_K>;
    if (type == TensorType::kQ6_K) return kKDot<TensorType::kQ6_K>;
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
