// The 16-float-vector GEMM of gemm_lanes.h against the AVX2 GEMM, bit for bit.
//
// It runs twice: with P = plain arrays and std::fma (a fused multiply-add rounded once,
// like the hardware's), on every CPU with AVX2, so the AVX-512 GEMM's tiling, panels, tails
// and lane reduction are executed and checked on machines without AVX-512; and with the
// AVX-512 kernel table itself, where the CPU has it (skipped elsewhere, saying so).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm_lanes.h"
#include "kernels/cpu/gemm_layout.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/kernels_test_util.h"

namespace cascade {
namespace {

using testing::MakeWeight;
using testing::Random;
using testing::TestWeight;

// 16 float lanes in plain C++: what the AVX-512 instructions compute, lane by lane.
struct Emulated16 {
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
      : data(static_cast<float*>(std::aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64))) {}
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data;
};

// One matmul of tokens [0, n) x rows [r0, r1) of w, with `fn` or with the emulated GEMM,
// packed activations shared (as the backend's threads share them) or packed by the kernel.
std::vector<float> RunMatmul(const TestWeight& w, const std::vector<float>& x, int64_t n, int64_t r0,
                       int64_t r1, bool shared_pack, cpu::MatmulFn fn) {
  const int64_t rows = w.view.rows(), k = w.view.cols();
  std::vector<float> y(n * rows, -7.0f);
  Aligned scratch(cpu::ScratchFloats(k));
  cpu::MatmulTask t;
  t.w = w.view.data;
  t.w_stride = w.view.row_bytes();
  t.k = k;
  t.x = reinterpret_cast<const uint8_t*>(x.data());
  t.x_stride = k * sizeof(float);
  t.n = n;
  t.y = y.data();
  t.ldy = rows;
  t.r0 = r0;
  t.r1 = r1;
  t.scratch = scratch.data.get();
  const cpu::KernelTable& avx2 = cpu::Avx2Kernels();
  std::unique_ptr<Aligned> packed;
  if (shared_pack) {
    packed = std::make_unique<Aligned>(avx2.packed_f32_floats(n, k));
    avx2.pack_f32(t, 0, 2, packed->data.get());  // in two parts, as two threads would
    avx2.pack_f32(t, 1, 2, packed->data.get());
    t.packed_x = packed->data.get();
  }
  if (fn != nullptr) {
    fn(t);
  } else {
    cpu::lanes16::LaneGemm<Emulated16>(t, w.view.type);
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
const Shape kShapes[] = {{20, 16, 0, 45},    {1100, 35, 0, 45},  {1100, 141, 3, 41},
                         {2060, 17, 16, 33}, {300, 270, 0, 45}, {1100, 64, 29, 45}};

TEST(LaneGemm16, EmulatedVectorsMatchTheAvx2GemmBitForBit) {
  if (!HasAvx2()) GTEST_SKIP() << "the panels are packed by AVX2 code; this CPU has no AVX2";
  for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kBF16}) {
    for (const Shape& s : kShapes) {
      const TestWeight w = MakeWeight(type, 45, s.k, 3);
      const auto x = Random(s.n * s.k, 9);
      const cpu::MatmulFn avx2 = cpu::Avx2Kernels().matmul(type, cpu::ActFormat::kF32);
      for (bool shared : {false, true}) {
        const auto want = RunMatmul(w, x, s.n, s.r0, s.r1, shared, avx2);
        const auto got = RunMatmul(w, x, s.n, s.r0, s.r1, shared, nullptr);
        // Rows outside [r0, r1) keep the -7 both runs start with, so the whole output
        // also checks that nothing is written past the range.
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << TensorTypeName(type) << " k=" << s.k << " n=" << s.n << " rows [" << s.r0
            << ", " << s.r1 << ") shared pack " << shared;
      }
    }
  }
}

TEST(LaneGemm16, Avx512TableMatchesTheAvx2GemmBitForBit) {
  if (DetectCpuFeatures().best() < CpuIsa::kAvx512) {
    GTEST_SKIP() << "needs a CPU with AVX-512 F/BW/VL/DQ; this one: "
                 << DetectCpuFeatures().Describe();
  }
  for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kBF16}) {
    for (const Shape& s : kShapes) {
      const TestWeight w = MakeWeight(type, 45, s.k, 4);
      const auto x = Random(s.n * s.k, 10);
      const cpu::MatmulFn avx2 = cpu::Avx2Kernels().matmul(type, cpu::ActFormat::kF32);
      const cpu::MatmulFn avx512 = cpu::Avx512Kernels().matmul(type, cpu::ActFormat::kF32);
      for (bool shared : {false, true}) {
        const auto want = RunMatmul(w, x, s.n, s.r0, s.r1, shared, avx2);
        const auto got = RunMatmul(w, x, s.n, s.r0, s.r1, shared, avx512);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << TensorTypeName(type) << " k=" << s.k << " n=" << s.n << " rows [" << s.r0
            << ", " << s.r1 << ") shared pack " << shared;
      }
    }
  }
}

}  // namespace
}  // namespace cascade
