// The AVX-512 kernels against the AVX2 ones, bit for bit: the 16-float-vector GEMM of
// gemm_lanes.h (F32/F16/BF16 weights), the 16-lane byte-dot-product kernel of
// quant_lanes.h (Q8_0/Q4_0 weights x Q8_0 activations, K-quants x Q8_K), and the decode
// kernels of avx512_decode.h (quantized weights, 1-16 / 1-32 tokens; float weights, one
// token: real instructions only).
//
// Each runs twice: with P = plain arrays (std::fma, a fused multiply-add rounded once like
// the hardware's; the byte dot product lane by lane), on every CPU with AVX2, so the
// AVX-512 kernels' tiling, panels, tails and reductions are executed and checked on
// machines without AVX-512; and with the AVX-512 kernel table itself, where the CPU has
// AVX-512 (and VNNI for the integer kernel; skipped elsewhere, saying so).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/avx512_decode.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm_lanes.h"
#include "kernels/cpu/gemm_layout.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/kernels_test_util.h"
#include "kernels/cpu/quant_lanes.h"
#include "tensor/quant.h"
#include "util/fp16.h"

namespace cascade {
namespace {

using testing::MakeWeight;
using testing::Random;
using testing::TestWeight;

// 16 float lanes in plain C++: what the AVX-512 instructions compute, lane by lane.
struct Emulated16 {
  static constexpr int kWidth = 16;
  static constexpr bool kPairTiles = true;  // as Zmm
  struct V {
    float f[16];
  };
  static V Zero() { return V{}; }
  static V Load(const float* p) {
    V v;
    std::memcpy(v.f, p, sizeof(v.f));
    return v;
  }
  static void Store(float* p, V v) { std::memcpy(p, v.f, sizeof(v.f)); }
  static void StoreFirst(float* p, V v, int count) { std::memcpy(p, v.f, count * sizeof(float)); }
  static V Splat(const float* p) {
    V v;
    for (float& x : v.f) x = *p;
    return v;
  }
  static V Fma(V a, V b, V c) {
    for (int i = 0; i < 16; ++i) c.f[i] = std::fma(a.f[i], b.f[i], c.f[i]);
    return c;
  }
  static V Add(V a, V b) {
    for (int i = 0; i < 16; ++i) a.f[i] += b.f[i];
    return a;
  }
};

struct Aligned {
  explicit Aligned(size_t floats)
      : data(static_cast<float*>(std::aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64))) {
  }
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data;
};

// Tokens [0, n) of x (x_stride bytes apart) times rows [r0, r1) of w into y (n x rows).
cpu::MatmulTask Task(const TestWeight& w, const uint8_t* x, size_t x_stride, int64_t n, int64_t r0,
                     int64_t r1, float* y, float* scratch) {
  cpu::MatmulTask t;
  t.w = w.view.data;
  t.w_stride = w.view.row_bytes();
  t.k = w.view.cols();
  t.x = x;
  t.x_stride = x_stride;
  t.n = n;
  t.y = y;
  t.ldy = w.view.rows();
  t.r0 = r0;
  t.r1 = r1;
  t.scratch = scratch;
  return t;
}

// One matmul of tokens [0, n) x rows [r0, r1) of w, with `fn` or with the emulated GEMM,
// packed activations shared (as the backend's threads share them) or packed by the kernel.
std::vector<float> RunMatmul(const TestWeight& w, const std::vector<float>& x, int64_t n,
                             int64_t r0, int64_t r1, bool shared_pack, cpu::MatmulFn fn,
                             const cpu::KernelTable& packer = cpu::Avx2Kernels()) {
  const int64_t rows = w.view.rows(), k = w.view.cols();
  std::vector<float> y(n * rows, -7.0f);
  Aligned scratch(cpu::ScratchFloats(k));
  cpu::MatmulTask t = Task(w, reinterpret_cast<const uint8_t*>(x.data()), k * sizeof(float), n, r0,
                           r1, y.data(), scratch.data.get());
  std::unique_ptr<Aligned> packed;
  const TensorType type = w.view.type;
  if (shared_pack && packer.packed_f32_floats(type, n, k) > 0) {
    packed = std::make_unique<Aligned>(packer.packed_f32_floats(type, n, k));
    packer.pack_f32(type, t, 0, 2, packed->data.get());  // in two parts, as two threads would
    packer.pack_f32(type, t, 1, 2, packed->data.get());
    t.packed_x = packed->data.get();
  }
  if (fn != nullptr) {
    fn(t);
  } else {
    cpu::lanes::LaneGemm<Emulated16>(t, w.view.type);
  }
  return y;
}

bool HasAvx2() { return DetectCpuFeatures().best() >= CpuIsa::kAvx2; }

// Rows 45: a full 32-row panel and a 13-row one, or ranges that start mid-panel and end in
// a panel of at most 16 rows; n: one tile pair and a half tile (16), odd tiles (35), two
// token blocks (141), three (270); k: a tail of 4, and several 128-step chunks with a tail.
struct Shape {
  int64_t k, n, r0, r1;
};
const Shape kShapes[] = {{20, 16, 0, 45},    {1100, 35, 0, 45}, {1100, 141, 3, 41},
                         {2060, 17, 16, 33}, {300, 270, 0, 45}, {1100, 64, 29, 45}};

// kernel(type): the float matmul to check (null: the emulated 16-lane GEMM); packer: the
// table whose pack_f32 lays out what that kernel reads when the activations are shared.
void ExpectGemmMatchesAvx2(cpu::MatmulFn (*kernel)(TensorType),
                           const cpu::KernelTable& packer = cpu::Avx2Kernels()) {
  for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kBF16}) {
    for (const Shape& s : kShapes) {
      const TestWeight w = MakeWeight(type, 45, s.k, 3);
      const auto x = Random(s.n * s.k, 9);
      const cpu::MatmulFn avx2 = cpu::Avx2Kernels().matmul(type, cpu::ActFormat::kF32);
      for (bool shared : {false, true}) {
        const auto want = RunMatmul(w, x, s.n, s.r0, s.r1, shared, avx2);
        const auto got = RunMatmul(w, x, s.n, s.r0, s.r1, shared, kernel(type), packer);
        // Rows outside [r0, r1) keep the -7 both runs start with, so the whole output
        // also checks that nothing is written past the range.
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << TensorTypeName(type) << " k=" << s.k << " n=" << s.n << " rows [" << s.r0 << ", "
            << s.r1 << ") shared pack " << shared;
      }
    }
  }
}

TEST(LaneGemm16, EmulatedVectorsMatchTheAvx2GemmBitForBit) {
  if (!HasAvx2()) GTEST_SKIP() << "the panels are packed by AVX2 code; this CPU has no AVX2";
  ExpectGemmMatchesAvx2([](TensorType) -> cpu::MatmulFn { return nullptr; });
}

TEST(LaneGemm16, Avx512TableMatchesTheAvx2GemmBitForBit) {
  if (DetectCpuFeatures().best() < CpuIsa::kAvx512) {
    GTEST_SKIP() << "needs a CPU with AVX-512 F/BW/VL/DQ; this one: "
                 << DetectCpuFeatures().Describe();
  }
  ExpectGemmMatchesAvx2(
      [](TensorType type) { return cpu::Avx512Kernels().matmul(type, cpu::ActFormat::kF32); },
      cpu::Avx512Kernels());
}

// 16 int32 / float lanes with a 4-way byte dot product, lane by lane.
struct EmulatedDot16 {
  struct IV {
    int32_t i[16];
  };
  using FV = Emulated16::V;
  static FV ZeroF() { return FV{}; }
  static IV SplatI(int32_t v) {
    IV r;
    for (int32_t& x : r.i) x = v;
    return r;
  }
  static IV LoadI(const void* p) {
    IV r;
    std::memcpy(r.i, p, sizeof(r.i));
    return r;
  }
  static IV Bcast4(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return SplatI(v);
  }
  static IV Dot4(IV acc, IV u, IV s) {
    for (int l = 0; l < 16; ++l) {
      uint8_t ub[4];
      int8_t sb[4];
      std::memcpy(ub, &u.i[l], 4);
      std::memcpy(sb, &s.i[l], 4);
      for (int q = 0; q < 4; ++q) acc.i[l] += static_cast<int32_t>(ub[q]) * sb[q];
    }
    return acc;
  }
  static void StoreI(int32_t* p, IV v) { std::memcpy(p, v.i, sizeof(v.i)); }
  static FV LoadF(const float* p) { return Emulated16::Load(p); }
  static FV SplatF(float v) { return Emulated16::Splat(&v); }
  static FV MulF(FV a, FV b) {
    for (int l = 0; l < 16; ++l) a.f[l] *= b.f[l];
    return a;
  }
  static FV CvtF(IV v) {
    FV r;
    for (int l = 0; l < 16; ++l) r.f[l] = static_cast<float>(v.i[l]);
    return r;
  }
  static FV Fma(FV a, FV b, FV c) { return Emulated16::Fma(a, b, c); }
  static void StoreFirstF(float* p, FV v, int count) { Emulated16::StoreFirst(p, v, count); }
  static IV AddI(IV a, IV b) {
    for (int l = 0; l < 16; ++l) a.i[l] += b.i[l];
    return a;
  }
  static IV SubI(IV a, IV b) {
    for (int l = 0; l < 16; ++l) a.i[l] -= b.i[l];
    return a;
  }
  static IV MulLoI(IV a, IV b) {  // the low 32 bits of the product (no overflow here)
    for (int l = 0; l < 16; ++l) a.i[l] *= b.i[l];
    return a;
  }
  static IV Dot2(IV acc, IV a, IV b) {
    for (int l = 0; l < 16; ++l) {
      int16_t ah[2], bh[2];
      std::memcpy(ah, &a.i[l], 4);
      std::memcpy(bh, &b.i[l], 4);
      acc.i[l] += ah[0] * bh[0] + ah[1] * bh[1];
    }
    return acc;
  }
  static FV Fnma(FV a, FV b, FV c) {
    for (int l = 0; l < 16; ++l) c.f[l] = std::fma(-a.f[l], b.f[l], c.f[l]);
    return c;
  }
};

// One quantized-activation matmul (Q8_0 activations for Q8_0/Q4_0 weights, Q8_K for
// K-quants) of tokens [0, n) x rows [r0, r1) with `fn`, or with the emulated 16-lane kernel
// when fn is null.
std::vector<float> RunQuantMatmul(const TestWeight& w, const std::vector<float>& x, int64_t n,
                                  int64_t r0, int64_t r1, cpu::MatmulFn fn) {
  const int64_t rows = w.view.rows(), k = w.view.cols();
  const cpu::ActFormat fmt = cpu::ActFormatFor(w.view.type, true);
  const size_t row_bytes = cpu::ActRowBytes(fmt, k);
  std::vector<uint8_t> xq(n * row_bytes);
  for (int64_t i = 0; i < n; ++i) {
    const cpu::KernelTable& scalar = cpu::ScalarKernels();
    (fmt == cpu::ActFormat::kQ8_0 ? scalar.quantize_q8_0 : scalar.quantize_q8k)(
        x.data() + i * k, k, xq.data() + i * row_bytes);
  }
  std::vector<float> y(n * rows, -7.0f);
  Aligned scratch(cpu::ScratchFloats(k));
  cpu::MatmulTask t = Task(w, xq.data(), row_bytes, n, r0, r1, y.data(), scratch.data.get());
  if (fn != nullptr) {
    fn(t);
  } else if (fmt == cpu::ActFormat::kQ8_0) {
    cpu::dot16::QuantBlocked<EmulatedDot16>(t, w.view.type);
  } else {
    cpu::dot16::KQuantBlocked<EmulatedDot16>(t, w.view.type);
  }
  return y;
}

// Rows 45: two full 16-row panels and a 13-row one, or ranges that start mid-panel; n: one
// tile (8), a tile and one token (9), tiles and a remainder of 3 (35), 141 and 300 (two
// token blocks at k = 2048); k: 2 blocks, 34, 64.
struct QuantShape {
  int64_t k, n, r0, r1;
};
const QuantShape kQuantShapes[] = {{64, 8, 0, 45},     {1088, 9, 0, 45},    {1088, 35, 3, 41},
                                   {1088, 141, 0, 45}, {2048, 300, 16, 33}, {64, 15, 29, 45}};

// K-quants: k of 1, 4 and 8 super-blocks; n from 16 (where the kernel starts) with tiles of
// 8 and remainders.
const QuantShape kKQuantShapes[] = {
    {256, 16, 0, 45}, {1024, 17, 0, 45}, {1024, 35, 3, 41}, {2048, 141, 16, 33}, {256, 23, 29, 45}};

template <size_t N>
void ExpectQuantKernelMatchesAvx2(std::initializer_list<TensorType> types,
                                  const QuantShape (&shapes)[N],
                                  cpu::MatmulFn (*kernel)(TensorType)) {
  for (TensorType type : types) {
    for (const QuantShape& s : shapes) {
      const TestWeight w = MakeWeight(type, 45, s.k, 5);
      const auto x = Random(s.n * s.k, 12);
      const cpu::ActFormat fmt = cpu::ActFormatFor(type, true);
      const auto want = RunQuantMatmul(w, x, s.n, s.r0, s.r1, cpu::Avx2Kernels().matmul(type, fmt));
      const auto got = RunQuantMatmul(w, x, s.n, s.r0, s.r1, kernel(type));
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << TensorTypeName(type) << " k=" << s.k << " n=" << s.n << " rows [" << s.r0 << ", "
          << s.r1 << ")";
    }
  }
}

cpu::MatmulFn Emulated(TensorType) { return nullptr; }

TEST(QuantDot16, EmulatedLanesMatchTheAvx2KernelsBitForBit) {
  if (!HasAvx2()) GTEST_SKIP() << "the panels are expanded by AVX2 code; this CPU has no AVX2";
  ExpectQuantKernelMatchesAvx2({TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ5_0,
                                TensorType::kIQ4_NL},
                               kQuantShapes, Emulated);
  ExpectQuantKernelMatchesAvx2({TensorType::kIQ4_XS}, kKQuantShapes, Emulated);
}

TEST(QuantDot16, EmulatedKQuantLanesMatchTheAvx2KernelsBitForBit) {
  if (!HasAvx2()) GTEST_SKIP() << "the panels are expanded by AVX2 code; this CPU has no AVX2";
  ExpectQuantKernelMatchesAvx2({TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K},
                               kKQuantShapes, Emulated);
}

TEST(QuantDot16, VnniTableMatchesTheAvx2KernelsBitForBit) {
  if (DetectCpuFeatures().best() < CpuIsa::kAvx512 || !DetectCpuFeatures().avx512vnni) {
    GTEST_SKIP() << "needs a CPU with AVX-512 F/BW/VL/DQ and VNNI; this one: "
                 << DetectCpuFeatures().Describe();
  }
  auto vnni = [](TensorType type) {
    return cpu::Avx512Kernels().matmul(type, cpu::ActFormatFor(type, true));
  };
  ExpectQuantKernelMatchesAvx2({TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kIQ4_NL,
                                TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1},
                               kQuantShapes, vnni);
  ExpectQuantKernelMatchesAvx2({TensorType::kIQ4_XS}, kKQuantShapes, vnni);
  ExpectQuantKernelMatchesAvx2({TensorType::kQ2_K, TensorType::kQ3_K, TensorType::kQ4_K,
                                TensorType::kQ5_K, TensorType::kQ6_K},
                               kKQuantShapes, vnni);
}

bool HasVnni() {
  return DetectCpuFeatures().best() >= CpuIsa::kAvx512 && DetectCpuFeatures().avx512vnni;
}

// The decode kernels: every token count they take, rows 45 (two full 16-row groups and a
// partial one, which the kernel moves down over rows it already wrote, masking them off)
// and ranges as threads get them: starting mid-group, fewer than 16 rows ending at row 16
// or later (a moved-down group) or below it (handed to AVX2), one row; k of one block,
// with odd block counts, and TinyLlama's FFN-down row.
const QuantShape kDecodeRanges[] = {{0, 0, 0, 45},   {0, 0, 3, 41},  {0, 0, 16, 33},
                                    {0, 0, 29, 45},  {0, 0, 8, 16},  {0, 0, 2, 13},
                                    {0, 0, 44, 45},  {0, 0, 17, 18}, {0, 0, 0, 16}};

void ExpectDecodeMatchesAvx2(TensorType type, std::initializer_list<int64_t> ks, int64_t max_n) {
  const cpu::ActFormat fmt = cpu::ActFormatFor(type, true);
  const cpu::MatmulFn avx2 = cpu::Avx2Kernels().matmul(type, fmt);
  const cpu::MatmulFn avx512 = cpu::Avx512Kernels().matmul(type, fmt);
  for (int64_t k : ks) {
    const TestWeight w = MakeWeight(type, 45, k, 21);
    const auto x = Random(max_n * k, 22);
    for (int64_t n = 1; n <= max_n; ++n) {
      for (const QuantShape& s : kDecodeRanges) {
        const auto want = RunQuantMatmul(w, x, n, s.r0, s.r1, avx2);
        const auto got = RunQuantMatmul(w, x, n, s.r0, s.r1, avx512);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << TensorTypeName(type) << " k=" << k << " n=" << n << " rows [" << s.r0 << ", "
            << s.r1 << ")";
      }
    }
  }
}

TEST(Avx512Decode, QuantMatchesTheAvx2KernelsBitForBit) {
  if (!HasVnni()) {
    GTEST_SKIP() << "needs a CPU with AVX-512 F/BW/VL/DQ and VNNI; this one: "
                 << DetectCpuFeatures().Describe();
  }
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kIQ4_NL,
                          TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1}) {
    ExpectDecodeMatchesAvx2(type, {32, 1088, 5632}, cpu::avx512::kQuantDecodeMaxTokens);
  }
  ExpectDecodeMatchesAvx2(TensorType::kIQ4_XS, {256, 1280, 5632},
                          cpu::avx512::kQuantDecodeMaxTokens);
}

TEST(Avx512Decode, KQuantsMatchTheAvx2KernelsBitForBit) {
  if (!HasVnni()) {
    GTEST_SKIP() << "needs a CPU with AVX-512 F/BW/VL/DQ and VNNI; this one: "
                 << DetectCpuFeatures().Describe();
  }
  for (TensorType type : {TensorType::kQ2_K, TensorType::kQ3_K, TensorType::kQ4_K,
                          TensorType::kQ5_K, TensorType::kQ6_K}) {
    // Up to the first token count the panels (Q2_K / Q3_K: the AVX2 kernel) take.
    ExpectDecodeMatchesAvx2(type, {256, 1280, 5632},
                            cpu::avx512::KQuantDecodeMaxTokens(type) + 1);
  }
}

// Float weights x 2-16 tokens: the AVX-512 table's token-pair tiles (3-16; 2 stays on the
// AVX2 tiles) against the AVX2 tiles and GEMM (16), bit for bit, for every token count (odd ones
// repeat a token in the last pair), row ranges as threads get them (tiles and single rows left
// over), and k with tails of 1-7 elements; rows outside the range stay untouched; the same
// with the pairs packed once for all threads (the table's pack_f32, in two parts).
TEST(FloatFewTokens, Avx512TableMatchesTheAvx2TilesBitForBit) {
  if (DetectCpuFeatures().best() < CpuIsa::kAvx512) {
    GTEST_SKIP() << "needs a CPU with AVX-512 F/BW/VL/DQ; this one: "
                 << DetectCpuFeatures().Describe();
  }
  for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kBF16}) {
    const cpu::MatmulFn avx2 = cpu::Avx2Kernels().matmul(type, cpu::ActFormat::kF32);
    const cpu::MatmulFn avx512 = cpu::Avx512Kernels().matmul(type, cpu::ActFormat::kF32);
    for (int64_t k : {3, 8, 13, 20, 101, 1100}) {
      const TestWeight w = MakeWeight(type, 45, k, 51);
      const auto x = Random(16 * k, 52);
      for (int64_t n = 2; n <= 16; ++n) {
        for (const QuantShape& s : kDecodeRanges) {
          const auto want = RunMatmul(w, x, n, s.r0, s.r1, false, avx2);
          const auto got = RunMatmul(w, x, n, s.r0, s.r1, false, avx512);
          ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
              << TensorTypeName(type) << " k=" << k << " n=" << n << " rows [" << s.r0 << ", "
              << s.r1 << ")";
          // With the pairs packed once for the matmul's threads, in two parts (PackF32).
          const auto shared = RunMatmul(w, x, n, s.r0, s.r1, true, avx512, cpu::Avx512Kernels());
          ASSERT_EQ(std::memcmp(shared.data(), want.data(), shared.size() * sizeof(float)), 0)
              << TensorTypeName(type) << " k=" << k << " n=" << n << " rows [" << s.r0 << ", "
              << s.r1 << ") packed once";
        }
      }
    }
  }
}

// One token against float activations, on every table this CPU runs (the AVX-512 table
// takes the AVX2 tiles for one or two tokens, its token-pair tiles for 3-16) and with both
// one-token tiles (2 and 8 rows, one of which the tables take on this CPU): F16 / BF16 / F32
// weights and Q4_K dequantized to floats (the exact mode's 8-row tile on rows in scratch). Rows as
// threads get them (one-row ranges, odd ones, ranges ending below row 16), k with tails of every
// length below 8 and TinyLlama's FFN-down row; each row equals that row of batches of 2..16 tokens
// (the few-token tiles, their passes, the GEMM) of the table bit for bit, and is within rounding of
// the float64 product.
TEST(FloatDecode, OneTokenIsBatchInvariantAndExactOnEveryTable) {
  if (!HasAvx2()) GTEST_SKIP() << "needs AVX2; this CPU: " << DetectCpuFeatures().Describe();
  std::vector<const cpu::KernelTable*> tables = {&cpu::Avx2Kernels()};
  if (DetectCpuFeatures().best() >= CpuIsa::kAvx512) tables.push_back(&cpu::Avx512Kernels());
  const int64_t rows = 45, max_n = 16;
  struct Case {
    TensorType type;
    std::vector<int64_t> ks;
  };
  const Case cases[] = {{TensorType::kF16, {8, 20, 101, 1100, 5632}},
                        {TensorType::kBF16, {8, 101, 1100}},
                        {TensorType::kF32, {13, 1100}},
                        {TensorType::kQ4_K, {256, 1280}}};
  for (const cpu::KernelTable* table : tables) {
    for (const Case& c : cases) {
      const cpu::MatmulFn fn = table->matmul(c.type, cpu::ActFormat::kF32);
      // The one-token kernels: the table's, and both tiles for the float weights.
      std::vector<std::pair<std::string, cpu::MatmulFn>> ones = {{"table", fn}};
      for (int tile : {2, 8}) {
        if (cpu::MatmulFn f = cpu::Avx2FloatMatmul(c.type, tile)) {
          ones.emplace_back(std::to_string(tile) + "-row tile", f);
        }
      }
      ASSERT_EQ(ones.size(), c.type == TensorType::kQ4_K ? 1u : 3u);
      for (int64_t k : c.ks) {
        const TestWeight w = MakeWeight(c.type, rows, k, 41);
        const auto x = Random(max_n * k, 42);
        const std::string what = std::string(TensorTypeName(c.type)) + " k=" + std::to_string(k);
        for (int64_t n = 1; n <= max_n; n += n < 6 ? 1 : 5) {  // 1-6, 11, 16
          const auto batch = RunMatmul(w, x, n, 0, rows, false, fn);
          for (int64_t i = 0; i < n; ++i) {
            const std::vector<float> xi(x.begin() + i * k, x.begin() + (i + 1) * k);
            for (const auto& [name, one_fn] : ones) {
              for (const QuantShape& s : kDecodeRanges) {
                const auto one = RunMatmul(w, xi, 1, s.r0, s.r1, false, one_fn);
                for (int64_t r = s.r0; r < s.r1; ++r) {
                  ASSERT_EQ(std::memcmp(&one[r], &batch[i * rows + r], sizeof(float)), 0)
                      << what << " " << name << " n=" << n << " token " << i << " row " << r
                      << " of [" << s.r0 << ", " << s.r1 << ")";
                }
                for (int64_t r = 0; r < rows; ++r) {  // rows outside the range: untouched
                  if (r < s.r0 || r >= s.r1) {
                    ASSERT_EQ(one[r], -7.0f) << what << " " << name << " row " << r;
                  }
                }
              }
            }
          }
        }
        const auto one = RunMatmul(w, std::vector<float>(x.begin(), x.begin() + k), 1, 0, rows,
                                   false, fn);
        for (int64_t r = 0; r < rows; ++r) {
          double ref = 0, mag = 0;
          for (int64_t e = 0; e < k; ++e) {
            ref += static_cast<double>(w.dequant[r * k + e]) * x[e];
            mag += std::abs(static_cast<double>(w.dequant[r * k + e]) * x[e]);
          }
          ASSERT_NEAR(one[r], ref, 1e-5 * mag + 1e-6) << what << " row " << r;
        }
      }
    }
  }
}

// Batch invariance of the AVX-512 table around the decode kernels: every row of every
// token, computed in batches of n = 1..16 (decode kernel, then panels) and in row ranges
// split anywhere, equals that token's row computed alone over all rows; and alone it is
// within rounding of the float64 product of the dequantized weights with the quantized
// activations.
TEST(Avx512Decode, BatchInvariantAcrossTokensAndRowSplits) {
  if (!HasVnni()) {
    GTEST_SKIP() << "needs a CPU with AVX-512 F/BW/VL/DQ and VNNI; this one: "
                 << DetectCpuFeatures().Describe();
  }
  const int64_t rows = 45, max_n = 16;
  for (TensorType type : {TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ5_0,
                          TensorType::kQ5_1, TensorType::kQ2_K, TensorType::kQ3_K,
                          TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K}) {
    const int64_t k = cpu::ActFormatFor(type, true) == cpu::ActFormat::kQ8_0 ? 1088 : 1280;
    const cpu::MatmulFn fn = cpu::Avx512Kernels().matmul(type, cpu::ActFormatFor(type, true));
    const TestWeight w = MakeWeight(type, rows, k, 31);
    const auto x = Random(max_n * k, 32);
    std::vector<float> alone(max_n * rows);
    for (int64_t i = 0; i < max_n; ++i) {
      const std::vector<float> xi(x.begin() + i * k, x.begin() + (i + 1) * k);
      const auto y = RunQuantMatmul(w, xi, 1, 0, rows, fn);
      std::copy(y.begin(), y.end(), alone.begin() + i * rows);
      // Against the dequantized weights times the quantized activations (float64).
      const cpu::ActFormat fmt = cpu::ActFormatFor(type, true);
      std::vector<uint8_t> xq(cpu::ActRowBytes(fmt, k));
      std::vector<float> xe(k);
      if (fmt == cpu::ActFormat::kQ8_0) {
        cpu::ScalarKernels().quantize_q8_0(xi.data(), k, xq.data());
        const auto* b = reinterpret_cast<const BlockQ8_0*>(xq.data());
        for (int64_t e = 0; e < k; ++e) xe[e] = b[e / kQK].qs[e % kQK] * Fp16ToFloat(b[e / kQK].d);
      } else {
        cpu::ScalarKernels().quantize_q8k(xi.data(), k, xq.data());
        const auto* b = reinterpret_cast<const BlockQ8K*>(xq.data());
        for (int64_t e = 0; e < k; ++e) xe[e] = b[e / kQKK].qs[e % kQKK] * b[e / kQKK].d;
      }
      double err = 0, norm = 0;
      for (int64_t r = 0; r < rows; ++r) {
        double ref = 0;
        for (int64_t e = 0; e < k; ++e) ref += static_cast<double>(w.dequant[r * k + e]) * xe[e];
        err += (y[r] - ref) * (y[r] - ref);
        norm += ref * ref;
      }
      ASSERT_LT(std::sqrt(err / norm), 2e-6) << TensorTypeName(type) << " token " << i;
    }
    for (int64_t n = 1; n <= max_n; ++n) {
      for (int64_t split : {int64_t{0}, int64_t{5}, int64_t{16}, int64_t{23}, int64_t{40}}) {
        std::vector<float> y(n * rows, -7.0f);
        const auto lo = RunQuantMatmul(w, x, n, 0, split, fn);
        const auto hi = RunQuantMatmul(w, x, n, split, rows, fn);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t r = 0; r < rows; ++r) {
            y[i * rows + r] = r < split ? lo[i * rows + r] : hi[i * rows + r];
          }
        }
        ASSERT_EQ(std::memcmp(y.data(), alone.data(), y.size() * sizeof(float)), 0)
            << TensorTypeName(type) << " n=" << n << " split at row " << split;
      }
    }
  }
}

// The AVX-512 attention against the AVX2 one, bit for bit: GQA groups of 1 to 8 heads
// (odd ones leave a last head alone; 2, 3, 5, 6 and 7 leave 1-3 heads after the runs of
// 4 that share V loads), head sizes of 8 to 128 (64 and 128 with the query held in
// registers, at blocks of 16 to 128; others loading it as they go), contexts that end inside a KV
// block and past the last full 8 positions of one, scattered blocks; groups of one
// (multi-head attention, the head in both halves) at head sizes 24, 64, 72 and 128.
TEST(Avx512Attention, MatchesTheAvx2KernelBitForBit) {
  if (DetectCpuFeatures().best() < CpuIsa::kAvx512) {
    GTEST_SKIP() << "needs a CPU with AVX-512 F/BW/VL/DQ; this one: "
                 << DetectCpuFeatures().Describe();
  }
  struct Shape {
    int n_heads, n_kv, hd, block_size, n_ctx;
  };
  for (const Shape sh :
       {Shape{8, 1, 64, 16, 37}, Shape{32, 4, 64, 16, 200}, Shape{6, 2, 8, 8, 5},
        Shape{7, 1, 128, 32, 70}, Shape{4, 4, 72, 16, 33}, Shape{10, 2, 16, 16, 1},
        Shape{16, 2, 64, 16, 16}, Shape{4, 2, 64, 16, 41}, Shape{12, 2, 128, 16, 50},
        Shape{6, 1, 64, 64, 130}, Shape{3, 1, 64, 128, 200}, Shape{8, 2, 32, 16, 45},
        Shape{4, 4, 64, 32, 45}, Shape{2, 2, 128, 64, 100}, Shape{3, 3, 24, 32, 60}}) {
    const int kv = sh.n_kv * sh.hd;
    const int n_blocks = (sh.n_ctx + sh.block_size - 1) / sh.block_size;
    std::vector<int32_t> blocks(n_blocks);
    for (int b = 0; b < n_blocks; ++b) blocks[b] = (b * 7 + 3) % (n_blocks + 2);  // scattered
    const int pool_blocks = n_blocks + 2;
    const auto k_pool = Random(pool_blocks * sh.block_size * kv, 1);
    const auto v_pool = Random(pool_blocks * sh.block_size * kv, 2);
    const auto q = Random(sh.n_heads * sh.hd, 3, 2.0f);
    const int group = sh.n_heads / sh.n_kv;
    std::vector<float> want(sh.n_heads * sh.hd), got(sh.n_heads * sh.hd, 9.0f);
    std::vector<float> scratch(group * sh.block_size);
    AttentionQuery query_want{q.data(), want.data(), blocks.data(), sh.n_ctx};
    AttentionQuery query_got{q.data(), got.data(), blocks.data(), sh.n_ctx};
    AttentionParams p{sh.n_heads, sh.n_kv, sh.hd, 0.125f, sh.block_size, k_pool.data(),
                      v_pool.data(), &query_want, 1};
    for (int kvh = 0; kvh < sh.n_kv; ++kvh) {
      cpu::Avx2Kernels().attention_group(p, &query_want, 1, kvh, scratch.data());
      cpu::Avx512Kernels().attention_group(p, &query_got, 1, kvh, scratch.data());
    }
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << "heads " << sh.n_heads << "/" << sh.n_kv << " head_dim " << sh.hd << " ctx "
        << sh.n_ctx;
    EXPECT_NE(cpu::Avx512Kernels().attention_group, cpu::Avx2Kernels().attention_group);
  }
}

}  // namespace
}  // namespace cascade
