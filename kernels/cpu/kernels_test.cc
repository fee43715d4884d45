// Every CPU kernel on every code path the machine has (scalar always, AVX2 when present)
// against plain float64 references, with stated normalized-error bounds, and the batch
// invariance rule of kernel_table.h checked bit for bit: a row's result must not depend on
// how many rows are computed with it, on the tile that computes it, or on the thread count.
//
// Normalized error = ||got - want||_2 / ||want||_2 over all outputs. Bounds:
// - float activations (F32/F16/BF16 weights, quantized weights dequantized): 2e-6 against
//   the float64 product of the exactly dequantized weights (float32 accumulation);
// - quantized activations: 2e-6 against the float64 product of the dequantized weights and
//   the dequantized activation blocks (the kernel's integer sums are exact, only the float
//   block accumulation rounds), and 1e-2 against the unquantized product (the 8-bit
//   activation rounding itself).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/kernels_test_util.h"
#include "tensor/quant.h"
#include "util/fp16.h"

namespace cascade {
namespace {

using testing::AvailableIsas;
using testing::MakeWeight;
using testing::NormalizedError;
using testing::Random;
using testing::TestWeight;

// The activations a kernel multiplies with, as floats: x itself, or x quantized by the
// scalar (reference) activation quantizer and dequantized.
std::vector<float> EffectiveActivations(const std::vector<float>& x, int64_t k, cpu::ActFormat f) {
  if (f == cpu::ActFormat::kF32) return x;
  const int64_t n = static_cast<int64_t>(x.size()) / k;
  std::vector<float> out(x.size());
  std::vector<uint8_t> row(cpu::ActRowBytes(f, k));
  for (int64_t t = 0; t < n; ++t) {
    float* o = out.data() + t * k;
    if (f == cpu::ActFormat::kQ8_0) {
      cpu::ScalarKernels().quantize_q8_0(x.data() + t * k, k, row.data());
      const auto* b = reinterpret_cast<const BlockQ8_0*>(row.data());
      for (int64_t e = 0; e < k; ++e) o[e] = b[e / kQK].qs[e % kQK] * Fp16ToFloat(b[e / kQK].d);
    } else {
      QuantizeQ8K(x.data() + t * k, k, reinterpret_cast<BlockQ8K*>(row.data()));
      const auto* b = reinterpret_cast<const BlockQ8K*>(row.data());
      for (int64_t e = 0; e < k; ++e) o[e] = b[e / kQKK].qs[e % kQKK] * b[e / kQKK].d;
    }
  }
  return out;
}

std::vector<double> Reference(const TestWeight& w, const std::vector<float>& x, int64_t n,
                              int64_t k) {
  const int64_t rows = w.view.rows();
  std::vector<double> y(n * rows);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t e = 0; e < k; ++e) {
        s += static_cast<double>(w.dequant[r * k + e]) * static_cast<double>(x[t * k + e]);
      }
      y[t * rows + r] = s;
    }
  }
  return y;
}

struct MatmulCase {
  TensorType type;
  int64_t cols;
  bool quantized_act;
  // Normalized error bound against the float64 product with the activations the kernel
  // multiplies (exact ones, or the quantized ones dequantized).
  double bound = 2e-6;
};

std::string CaseName(const ::testing::TestParamInfo<MatmulCase>& info) {
  return std::string(TensorTypeName(info.param.type)) + "_k" + std::to_string(info.param.cols) +
         (info.param.quantized_act ? "_q8act" : "_f32act");
}

class MatmulPaths : public ::testing::TestWithParam<MatmulCase> {};

// n = 1-7 and 12 (decode and micro-batch tiles: float 1-5 in one tile, 6-15 in 2-3 passes;
// Q8_0/Q4_0 4-token tiles to 7; K-quants 4-token tiles to 15), 16, 35, 64, 129 (prefill
// panels, every remainder), 141 (two token blocks of the float GEMM); rows = 37 (partial
// row panels, uneven thread ranges); k with tails and several cache chunks.
TEST_P(MatmulPaths, MatchesReferenceAndIsBatchInvariant) {
  const MatmulCase c = GetParam();
  const int64_t rows = 37, k = c.cols, max_n = 141;
  const TestWeight w = MakeWeight(c.type, rows, k, 11);
  const auto x = Random(max_n * k, 5);
  const cpu::ActFormat fmt = cpu::ActFormatFor(c.type, c.quantized_act);
  const auto ref_exact = Reference(w, x, max_n, k);
  const auto ref_eff = Reference(w, EffectiveActivations(x, k, fmt), max_n, k);
  for (CpuIsa isa : AvailableIsas()) {
    auto make = [&](int threads) {
      CpuBackendOptions opt;
      opt.threads = threads;
      opt.max_isa = isa;
      opt.quantized_activations = c.quantized_act;
      return std::make_unique<CpuBackend>(opt);
    };
    auto one = make(1), two = make(2), three = make(3);
    // Every row alone (n = 1, one thread): the reference for bit-identity.
    std::vector<float> alone(max_n * rows);
    for (int64_t t = 0; t < max_n; ++t) {
      one->MatMul(w.view, x.data() + t * k, 1, alone.data() + t * rows);
    }
    const double err = NormalizedError(alone.data(), ref_eff);
    EXPECT_LT(err, c.bound) << one->name();
    if (fmt != cpu::ActFormat::kF32) {
      EXPECT_LT(NormalizedError(alone.data(), ref_exact), 1e-2) << one->name();
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3g", err);
    RecordProperty(std::string("normalized_error_") + CpuIsaName(isa), buf);
    for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 12, 16, 35, 64, 129, 141}) {
      for (CpuBackend* be : {one.get(), two.get(), three.get()}) {
        std::vector<float> y(n * rows, -1.0f);
        be->MatMul(w.view, x.data(), n, y.data());
        ASSERT_EQ(std::memcmp(y.data(), alone.data(), y.size() * sizeof(float)), 0)
            << "batch of " << n << " differs from rows computed alone on " << be->name();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, MatmulPaths,
    ::testing::Values(
        MatmulCase{TensorType::kF32, 1100, false}, MatmulCase{TensorType::kF16, 1100, false},
        MatmulCase{TensorType::kF16, 20, false}, MatmulCase{TensorType::kBF16, 1100, false},
        MatmulCase{TensorType::kQ8_0, 1088, true}, MatmulCase{TensorType::kQ8_0, 1088, false},
        MatmulCase{TensorType::kQ4_0, 1088, true}, MatmulCase{TensorType::kQ4_0, 1088, false},
        MatmulCase{TensorType::kQ4_1, 1088, true}, MatmulCase{TensorType::kQ4_1, 1088, false},
        MatmulCase{TensorType::kQ5_0, 1088, true}, MatmulCase{TensorType::kQ5_0, 1088, false},
        MatmulCase{TensorType::kQ5_1, 1088, true}, MatmulCase{TensorType::kQ5_1, 1088, false},
        MatmulCase{TensorType::kQ5_1, 5632, true}, MatmulCase{TensorType::kQ2_K, 1280, true},
        MatmulCase{TensorType::kQ2_K, 1280, false}, MatmulCase{TensorType::kQ3_K, 1280, true},
        MatmulCase{TensorType::kQ3_K, 1280, false}, MatmulCase{TensorType::kQ3_K, 5632, true},
        MatmulCase{TensorType::kQ4_K, 1280, true}, MatmulCase{TensorType::kQ4_K, 1280, false},
        MatmulCase{TensorType::kQ5_K, 1280, true}, MatmulCase{TensorType::kQ5_K, 1280, false},
        MatmulCase{TensorType::kQ6_K, 1280, true}, MatmulCase{TensorType::kQ6_K, 1280, false},
        MatmulCase{TensorType::kIQ4_NL, 1088, true}, MatmulCase{TensorType::kIQ4_NL, 1088, false},
        MatmulCase{TensorType::kIQ4_XS, 1280, true}, MatmulCase{TensorType::kIQ4_XS, 1280, false},
        // TinyLlama's ffn_down row length: the largest cache blocks and scratch use.
        MatmulCase{TensorType::kF16, 5632, false}, MatmulCase{TensorType::kQ4_K, 5632, true},
        MatmulCase{TensorType::kQ8_0, 5632, true},
        // Short rows (tails of every width) at the tighter bound of exact float products.
        MatmulCase{TensorType::kF32, 172, false, 1e-6},
        MatmulCase{TensorType::kF16, 172, false, 1e-6},
        MatmulCase{TensorType::kBF16, 100, false, 1e-6},
        MatmulCase{TensorType::kQ8_0, 256, false, 1e-6}, MatmulCase{TensorType::kQ8_0, 256, true},
        MatmulCase{TensorType::kQ4_0, 256, false, 1e-6}, MatmulCase{TensorType::kQ4_0, 256, true},
        MatmulCase{TensorType::kQ4_1, 224, false, 1e-6}, MatmulCase{TensorType::kQ4_1, 224, true},
        MatmulCase{TensorType::kQ5_0, 224, false, 1e-6}, MatmulCase{TensorType::kQ5_0, 224, true},
        MatmulCase{TensorType::kQ5_1, 224, false, 1e-6}, MatmulCase{TensorType::kQ5_1, 224, true},
        MatmulCase{TensorType::kQ2_K, 256, false, 1e-6}, MatmulCase{TensorType::kQ2_K, 256, true},
        MatmulCase{TensorType::kQ3_K, 256, false, 1e-6}, MatmulCase{TensorType::kQ3_K, 256, true},
        MatmulCase{TensorType::kQ4_K, 512, false, 1e-6}, MatmulCase{TensorType::kQ4_K, 512, true},
        MatmulCase{TensorType::kQ5_K, 512, true}, MatmulCase{TensorType::kQ6_K, 512, true},
        MatmulCase{TensorType::kQ6_K, 256, false, 1e-6},
        MatmulCase{TensorType::kIQ4_NL, 224, false, 1e-6}, MatmulCase{TensorType::kIQ4_NL, 224, true},
        MatmulCase{TensorType::kIQ4_XS, 256, false, 1e-6}, MatmulCase{TensorType::kIQ4_XS, 512, true}),
    CaseName);

// Weights that read the same input (a layer's Q, K and V) run as one: bit for bit each
// MatMul alone, for every type, in the file's layout and as uploaded (grouped where the
// ISA groups the type), with row counts that are not multiples of the kernels' row tiles,
// 1-3 threads and decode and prefill token counts; weights of mixed types or lengths fall
// back to one after another.
TEST(MatMulShared, IsEachMatMulAlone) {
  const int64_t rows[] = {37, 20, 53};
  for (const auto& [type, k] :
       {std::pair{TensorType::kF32, int64_t{172}}, std::pair{TensorType::kF16, int64_t{1100}},
        std::pair{TensorType::kQ8_0, int64_t{256}}, std::pair{TensorType::kQ4_0, int64_t{1088}},
        std::pair{TensorType::kQ4_K, int64_t{512}}, std::pair{TensorType::kQ6_K, int64_t{256}},
        std::pair{TensorType::kQ5_1, int64_t{224}}, std::pair{TensorType::kQ3_K, int64_t{512}},
        std::pair{TensorType::kIQ4_NL, int64_t{224}}, std::pair{TensorType::kIQ4_XS, int64_t{512}}}) {
    std::vector<TestWeight> ws;
    for (int i = 0; i < 3; ++i) ws.push_back(MakeWeight(type, rows[i], k, 40 + i));
    const TestWeight odd = MakeWeight(TensorType::kF32, 24, k, 50);  // another type
    const int64_t max_n = 35;
    const auto x = Random(max_n * k, 51);
    for (CpuIsa isa : AvailableIsas()) {
      for (int threads : {1, 2, 3}) {
        for (bool upload : {false, true}) {
          CpuBackendOptions opt;
          opt.threads = threads;
          opt.max_isa = isa;
          opt.quantized_activations = true;
          CpuBackend be(opt);
          std::vector<TensorView> views;
          for (const TestWeight& w : ws) {
            views.push_back(upload ? be.UploadWeight(w.view).value() : w.view);
          }
          views.push_back(upload ? be.UploadWeight(odd.view).value() : odd.view);
          for (int64_t n : {1, 3, 16, 35}) {
            // The three alike, then two of them with the other type between them.
            for (const std::vector<int>& pick :
                 {std::vector<int>{0, 1, 2}, std::vector<int>{2, 3, 0}}) {
              std::vector<std::vector<float>> want, got;
              std::vector<const TensorView*> wp;
              std::vector<float*> yp;
              for (int i : pick) {
                const int64_t r = views[i].rows();
                want.emplace_back(n * r, -1.0f);
                got.emplace_back(n * r, -2.0f);
                be.MatMul(views[i], x.data(), n, want.back().data());
                wp.push_back(&views[i]);
              }
              for (auto& g : got) yp.push_back(g.data());
              be.MatMulShared(wp.data(), static_cast<int>(wp.size()), x.data(), n, yp.data());
              for (size_t i = 0; i < pick.size(); ++i) {
                ASSERT_EQ(got[i], want[i])
                    << TensorTypeName(type) << " on " << be.name() << ", n " << n << ", "
                    << (upload ? "uploaded" : "in place") << ", weight " << pick[i];
              }
            }
          }
        }
      }
    }
  }
}

// Activations whose quantization hits ties, zeros, equal magnitudes of both signs and
// tiny or huge scales.
std::vector<float> HardActivations(int64_t k, uint32_t seed) {
  auto x = Random(k, seed);
  for (int64_t e = 0; e < k; ++e) {
    switch ((e / 32) % 6) {
      case 0:  // exact halves after scaling by 127 / 127
        x[e] = static_cast<float>(static_cast<int>(e % 32) - 16) + 0.5f;
        if (e % 32 == 0) x[e] = 127.0f;
        break;
      case 1:
        x[e] = 0.0f;
        break;
      case 2:  // +max and -max in the same block
        x[e] = (e % 2 == 0 ? 1.0f : -1.0f) * (e % 8 == 0 ? 3.0f : 0.25f * (e % 5));
        break;
      case 3:
        x[e] *= 1e-30f;
        break;
      case 4:
        x[e] *= 1e20f;
        break;
      default:
        break;
    }
  }
  return x;
}

TEST(ActivationQuantizers, EveryPathGivesTheReferenceBlocks) {
  for (int64_t k : {256, 1024, 2816}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      const auto x = seed == 1 ? HardActivations(k, seed) : Random(k, seed, 0.1f * seed);
      std::vector<uint8_t> want0(cpu::ActRowBytes(cpu::ActFormat::kQ8_0, k));
      std::vector<uint8_t> wantk(cpu::ActRowBytes(cpu::ActFormat::kQ8K, k));
      cpu::ScalarKernels().quantize_q8_0(x.data(), k, want0.data());
      QuantizeQ8K(x.data(), k, reinterpret_cast<BlockQ8K*>(wantk.data()));
      for (CpuIsa isa : AvailableIsas()) {
        const cpu::KernelTable& kt = cpu::KernelTableFor(isa);
        std::vector<uint8_t> got0(want0.size(), 0xAA), gotk(wantk.size(), 0xAA);
        kt.quantize_q8_0(x.data(), k, got0.data());
        kt.quantize_q8k(x.data(), k, gotk.data());
        EXPECT_EQ(got0, want0) << "Q8_0 blocks on " << CpuIsaName(isa) << ", k " << k;
        EXPECT_EQ(gotk, wantk) << "Q8_K blocks on " << CpuIsaName(isa) << ", k " << k;
      }
    }
  }
}

// ---- Activation quantizers against references written here from the ggml block formats.
//
// Q8_0 (ggml quantize_row_q8_0_ref): per 32 values amax = max|x|, d = amax / 127 in float,
// id = d ? 1 / d : 0, q = round(x * id), d stored as fp16 (round to nearest even). ggml's
// reference rounds q with roundf (ties away from zero); its AVX2 quantize_row_q8_0 rounds
// to nearest even (_mm256_round_ps). Cascade follows the reference for weights
// (QuantizeQ8_0 in tensor/quant.cc) and rounds activations to nearest even on every path
// (kernels_scalar.cc: "Activation rows use round-half-to-even"); the two differ only where
// x * id is exactly k + 1/2.
//
// Q8_K (ggml quantize_row_q8_K_ref): per 256 values, max = the first value of largest |x|
// (signed), iscale = -127 / max, q = min(127, nearest_int(iscale * x)) with ggml's
// nearest_int (add 1.5 * 2^23 in float: ties to even), d = 1 / iscale, bsums[j] = sum of
// q[16j .. 16j + 15]. An all-zero block is d = 0 and zero codes (ggml leaves its bsums
// unwritten; zero codes sum to zero, which is what Cascade stores).
enum class Ties { kAwayFromZero, kToEven };

// float -> IEEE half, round to nearest even, computed in double from the value (not bits).
uint16_t RefFp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double v = std::fabs(static_cast<double>(f));
  auto round_even = [](double q) {
    double r = std::floor(q);
    const double frac = q - r;
    if (frac > 0.5 || (frac == 0.5 && std::fmod(r, 2.0) != 0)) r += 1;
    return static_cast<uint32_t>(r);
  };
  if (std::isinf(v)) return sign | 0x7c00;
  if (v < std::ldexp(1.0, -14)) {  // subnormal: a multiple of 2^-24 (1024 of them is 2^-14)
    return static_cast<uint16_t>(sign | round_even(v * std::ldexp(1.0, 24)));
  }
  int e = 0;
  std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
  int exp = e - 1;    // v = (1 + frac) * 2^exp
  uint32_t mant = round_even((v / std::ldexp(1.0, exp) - 1.0) * 1024.0);
  if (mant == 1024) {
    mant = 0;
    ++exp;
  }
  if (exp + 15 >= 31) return sign | 0x7c00;  // overflow: infinity
  return static_cast<uint16_t>(sign | ((exp + 15) << 10) | mant);
}

// ggml's nearest_int: the float addition of 1.5 * 2^23 rounds to an integer (ties to even).
int GgmlNearestInt(float fval) {
  const float val = fval + 12582912.f;
  int32_t i;
  std::memcpy(&i, &val, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

std::vector<uint8_t> RefQuantizeQ8_0(const std::vector<float>& x, Ties ties) {
  std::vector<uint8_t> out;
  for (size_t b = 0; b < x.size() / 32; ++b) {
    const float* xb = x.data() + 32 * b;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = RefFp16(d);
    out.push_back(static_cast<uint8_t>(dh & 0xff));  // little-endian fp16, then 32 codes
    out.push_back(static_cast<uint8_t>(dh >> 8));
    for (int j = 0; j < 32; ++j) {
      const float v = xb[j] * id;
      const float q =
          ties == Ties::kAwayFromZero ? std::roundf(v) : static_cast<float>(GgmlNearestInt(v));
      out.push_back(static_cast<uint8_t>(static_cast<int8_t>(q)));
    }
  }
  return out;
}

std::vector<uint8_t> RefQuantizeQ8K(const std::vector<float>& x) {
  std::vector<uint8_t> out;
  for (size_t b = 0; b < x.size() / 256; ++b) {
    const float* xb = x.data() + 256 * b;
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < 256; ++j) {
      if (std::fabs(xb[j]) > amax) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    float d = 0.0f;
    int8_t q[256] = {};
    int16_t bsums[16] = {};
    if (amax != 0.0f) {
      const float iscale = -127.0f / max;
      for (int j = 0; j < 256; ++j)
        q[j] = static_cast<int8_t>(std::min(127, GgmlNearestInt(iscale * xb[j])));
      for (int g = 0; g < 16; ++g) {
        int sum = 0;
        for (int k = 0; k < 16; ++k) sum += q[16 * g + k];
        bsums[g] = static_cast<int16_t>(sum);
      }
      d = 1.0f / iscale;
    }
    // Layout (ggml block_q8_K): float d, int8 qs[256], int16 bsums[16], little-endian.
    uint8_t bytes[4 + 256 + 32];
    std::memcpy(bytes, &d, 4);
    std::memcpy(bytes + 4, q, 256);
    std::memcpy(bytes + 260, bsums, 32);
    out.insert(out.end(), bytes, bytes + sizeof(bytes));
  }
  return out;
}

// Blocks (of 256) built to hit the rules' edge cases: exact halves after scaling (a largest
// value of 127 makes d = 1, iscale = -1), the largest magnitude present with both signs
// (either first), an all-zero block, tiny and huge magnitudes.
std::vector<float> EdgeActivations() {
  std::vector<float> x;
  auto block = [&](auto f) {
    for (int j = 0; j < 256; ++j) x.push_back(f(j));
  };
  block([](int j) { return j == 0 ? 127.0f : static_cast<float>(j % 64 - 32) + 0.5f; });
  block([](int j) { return j == 5 ? -127.0f : static_cast<float>(j % 50 - 25) - 0.5f; });
  block([](int j) { return j == 3 ? 5.0f : j == 7 ? -5.0f : 0.01f * (j % 17); });
  block([](int j) { return j == 3 ? -5.0f : j == 7 ? 5.0f : -0.01f * (j % 13); });
  block([](int) { return 0.0f; });
  block([](int j) { return 1e-30f * static_cast<float>(j % 9 - 4); });
  block([](int j) { return 3e20f * static_cast<float>(j % 11 - 5); });
  return x;
}

TEST(RefFp16, KnownValues) {
  EXPECT_EQ(RefFp16(1.0f), 0x3c00);
  EXPECT_EQ(RefFp16(-2.0f), 0xc000);
  EXPECT_EQ(RefFp16(65504.0f), 0x7bff);
  EXPECT_EQ(RefFp16(65519.0f), 0x7bff);
  EXPECT_EQ(RefFp16(65520.0f), 0x7c00);  // the tie rounds to even: infinity
  EXPECT_EQ(RefFp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(RefFp16(std::ldexp(1.0f, -25)), 0x0000);         // tie to even: zero
  EXPECT_EQ(RefFp16(std::ldexp(3.0f, -25)), 0x0002);         // 1.5 ulp: tie to even
  EXPECT_EQ(RefFp16(std::ldexp(1.0f, -14)), 0x0400);         // smallest normal
  EXPECT_EQ(RefFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(RefFp16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
  EXPECT_EQ(RefFp16(0.1f), 0x2e66);
  // And it agrees with util/fp16.h on a sweep of magnitudes.
  for (uint32_t bits = 0x30000000u; bits < 0x48000000u; bits += 0x1001u) {
    const float f = std::bit_cast<float>(bits);
    ASSERT_EQ(RefFp16(f), FloatToFp16(f)) << f;
  }
}

TEST(ActivationQuantizers, MatchTheGgmlBlockDefinitionsBitForBit) {
  std::vector<std::vector<float>> inputs = {EdgeActivations(), HardActivations(2816, 1),
                                            Random(1024, 2, 0.1f), Random(2816, 3, 3.0f)};
  int ties_seen = 0;
  for (const auto& x : inputs) {
    const int64_t k = static_cast<int64_t>(x.size());
    const auto want_even = RefQuantizeQ8_0(x, Ties::kToEven);
    const auto want_away = RefQuantizeQ8_0(x, Ties::kAwayFromZero);
    const auto want_k = RefQuantizeQ8K(x);
    if (want_even != want_away) ++ties_seen;
    ASSERT_EQ(want_even.size(), cpu::ActRowBytes(cpu::ActFormat::kQ8_0, k));
    ASSERT_EQ(want_k.size(), cpu::ActRowBytes(cpu::ActFormat::kQ8K, k));
    // Every activation path (scalar, AVX2, AVX-512 tables; the scalar one is the kernel
    // tests' reference elsewhere).
    for (CpuIsa isa : AvailableIsas()) {
      const cpu::KernelTable& kt = cpu::KernelTableFor(isa);
      std::vector<uint8_t> got0(want_even.size(), 0xAA), gotk(want_k.size(), 0xAA);
      kt.quantize_q8_0(x.data(), k, got0.data());
      kt.quantize_q8k(x.data(), k, gotk.data());
      EXPECT_EQ(got0, want_even) << "Q8_0 activations on " << CpuIsaName(isa) << ", k " << k;
      EXPECT_EQ(gotk, want_k) << "Q8_K activations on " << CpuIsaName(isa) << ", k " << k;
    }
    // tensor/quant.cc: QuantizeQ8K (the K-quant activation format) and QuantizeQ8_0 (weights:
    // ggml's reference rounding, ties away from zero).
    std::vector<uint8_t> qk(want_k.size(), 0xAA), q0(want_away.size(), 0xAA);
    QuantizeQ8K(x.data(), k, reinterpret_cast<BlockQ8K*>(qk.data()));
    QuantizeQ8_0(x.data(), k, reinterpret_cast<BlockQ8_0*>(q0.data()));
    EXPECT_EQ(qk, want_k) << "QuantizeQ8K, k " << k;
    EXPECT_EQ(q0, want_away) << "QuantizeQ8_0, k " << k;
  }
  // The edge inputs do hit ties, so the two rounding rules were told apart above.
  EXPECT_GE(ties_seen, 2);
}

// CPUID's display family and model, as the kernels tune by them, against the kernel's
// own reading in /proc/cpuinfo (x86 Linux).
TEST(CpuFeatures, FamilyAndModelMatchTheKernelsReading) {
#if defined(__x86_64__) && defined(__linux__)
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  ASSERT_NE(f, nullptr);
  int family = -1, model = -1;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr && (family < 0 || model < 0)) {
    if (family < 0) std::sscanf(line, "cpu family : %d", &family);
    if (model < 0) std::sscanf(line, "model : %d", &model);
  }
  std::fclose(f);
  ASSERT_GE(family, 0) << "no cpu family line";
  const CpuFeatures& cpu = DetectCpuFeatures();
  EXPECT_EQ(cpu.family, family);
  EXPECT_EQ(cpu.model, model);
  EXPECT_NE(cpu.Describe().find("family 0x"), std::string::npos) << cpu.Describe();
#else
  GTEST_SKIP() << "reads /proc/cpuinfo of an x86 Linux";
#endif
}

// The per-core choices (kernel_table.h): on Zen 4 (AMD family 19h with AVX-512) the
// one-token float tile has 2 rows and the Q4_K grouped passes do not prefetch; elsewhere
// 8 rows, with prefetch.
TEST(CpuFeatures, PerCoreChoicesFollowTheCore) {
  CpuFeatures zen4;
  zen4.vendor = CpuVendor::kAmd;
  zen4.family = 0x19;
  zen4.avx512f = true;
  CpuFeatures zen3 = zen4;
  zen3.avx512f = false;
  CpuFeatures zen5 = zen4;
  zen5.family = 0x1A;
  CpuFeatures intel = zen4;
  intel.vendor = CpuVendor::kIntel;
  intel.family = 6;
  EXPECT_EQ(cpu::OneTokenFloatRows(zen4), 2);
  EXPECT_EQ(cpu::OneTokenFloatRows(zen3), 8);
  EXPECT_EQ(cpu::OneTokenFloatRows(zen5), 8);
  EXPECT_EQ(cpu::OneTokenFloatRows(intel), 8);
  EXPECT_EQ(cpu::OneTokenFloatRows(CpuFeatures{}), 8);
  EXPECT_FALSE(cpu::PrefetchGroupedQ4K(zen4));
  EXPECT_TRUE(cpu::PrefetchGroupedQ4K(zen3));
  EXPECT_TRUE(cpu::PrefetchGroupedQ4K(zen5));
  EXPECT_TRUE(cpu::PrefetchGroupedQ4K(intel));
  EXPECT_TRUE(cpu::PrefetchGroupedQ4K(CpuFeatures{}));
}

TEST(VectorKernels, MatchReferenceOnEveryPath) {
  for (CpuIsa isa : AvailableIsas()) {
    const cpu::KernelTable& kt = cpu::KernelTableFor(isa);
    for (int64_t n : {1, 7, 8, 9, 64, 67}) {
      const auto a = Random(n, 1), b = Random(n, 2);
      double dot = 0, ss = 0;
      for (int64_t i = 0; i < n; ++i) {
        dot += static_cast<double>(a[i]) * b[i];
        ss += static_cast<double>(a[i]) * a[i];
      }
      double mag = 0;
      for (int64_t i = 0; i < n; ++i) mag += std::fabs(static_cast<double>(a[i]) * b[i]);
      EXPECT_NEAR(kt.dot(a.data(), b.data(), n), dot, 1e-6 * mag) << CpuIsaName(isa);
      EXPECT_NEAR(kt.sum_squares(a.data(), n), ss, 1e-6 * ss) << CpuIsaName(isa);
      auto y = b;
      kt.axpy(0.75f, a.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], b[i] + 0.75 * a[i], 1e-6);
      kt.scale(-2.0f, y.data(), n);
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], -2.0 * (b[i] + 0.75 * a[i]), 2e-6);
    }
  }
}

// Rows into an F16 KV cache: every path gives FloatToFp16's bits (round to nearest even,
// overflow to infinity, subnormals, NaNs quieted), in the SIMD body and the scalar tail.
TEST(VectorKernels, FloatToF16IsFloatToFp16OnEveryPath) {
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          -2.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          -65520.0f,
                          1e10f,
                          -1e-10f,
                          std::ldexp(1.0f, -24),
                          std::ldexp(1.0f, -25),
                          std::ldexp(3.0f, -25),
                          std::ldexp(1.0f, -14),
                          std::ldexp(1023.0f, -24),
                          1.0f + std::ldexp(1.0f, -11),
                          1.0f + std::ldexp(3.0f, -11),
                          std::ldexp(1.0f, -130),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  for (uint32_t bits :
       {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fa00000u, 0xff812345u, 0x7fffffffu}) {
    x.push_back(std::bit_cast<float>(bits));  // quiet and signalling NaNs, payloads
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 20000; ++i) x.push_back(std::bit_cast<float>(any_bits(rng)));
  uint32_t seed = 8;
  for (float scale : {1e-6f, 1e-3f, 1.0f, 1e3f, 7e4f}) {
    for (float v : Random(999, seed++, scale)) x.push_back(v);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  ASSERT_NE((n - 1) % 8, 0);  // a tail past the last 8
  std::vector<uint16_t> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = FloatToFp16(x[i]);
  for (CpuIsa isa : AvailableIsas()) {
    const cpu::KernelTable& kt = cpu::KernelTableFor(isa);
    std::vector<uint16_t> got(n + 1, 0xabcd);
    kt.float_to_f16(x.data() + 1, n - 1, got.data() + 1);  // unaligned rows too
    EXPECT_EQ(got[0], 0xabcd) << CpuIsaName(isa);
    EXPECT_EQ(got[n], 0xabcd) << CpuIsaName(isa);
    for (int64_t i = 1; i < n; ++i) {
      ASSERT_EQ(got[i], want[i]) << CpuIsaName(isa) << " at " << i << ": bits "
                                 << std::bit_cast<uint32_t>(x[i]);
    }
  }
}

// Several sequences (different lengths, scattered blocks) with GQA: each query against a
// float64 softmax reference, and bit-identical whether computed alone, in the batch, or
// with another thread count.
TEST(Attention, MatchesReferenceAndIsBatchInvariant) {
  const int n_heads = 8, n_kv = 2, hd = 64, bs = 16, pool_blocks = 40;
  const int kv = n_kv * hd;
  const auto k_pool = Random(static_cast<int64_t>(pool_blocks) * bs * kv, 1);
  const auto v_pool = Random(static_cast<int64_t>(pool_blocks) * bs * kv, 2);
  const std::vector<std::vector<int32_t>> tables = {
      {7, 3, 30, 12, 5}, {1}, {39, 0, 20, 21, 22, 23, 24, 25, 26, 27}};
  const std::vector<int32_t> ctx = {70, 9, 150};
  std::vector<int> query_seq;
  std::vector<int32_t> query_ctx;
  for (int s = 0; s < 3; ++s) {  // a few positions of each sequence
    for (int32_t c : {ctx[s], ctx[s] - 1, 1}) {
      query_seq.push_back(s);
      query_ctx.push_back(std::max(1, c));
    }
  }
  const int nq = static_cast<int>(query_seq.size());
  const auto q = Random(static_cast<int64_t>(nq) * n_heads * hd, 3);
  const float scale = 0.125f;
  for (CpuIsa isa : AvailableIsas()) {
    std::vector<float> alone(static_cast<size_t>(nq) * n_heads * hd);
    std::vector<float> batched(alone.size()), batched3(alone.size());
    for (int threads : {1, 2, 3}) {
      CpuBackendOptions opt;
      opt.max_isa = isa;
      opt.threads = threads;
      CpuBackend be(opt);
      std::vector<AttentionQuery> qs(nq);
      for (int i = 0; i < nq; ++i) {
        float* out = (threads == 1   ? alone.data()
                      : threads == 2 ? batched.data()
                                     : batched3.data());
        qs[i] = {q.data() + i * n_heads * hd, out + i * n_heads * hd, tables[query_seq[i]].data(),
                 query_ctx[i]};
      }
      AttentionParams p{n_heads, n_kv, hd, scale, bs, k_pool.data(), v_pool.data(), nullptr, 0};
      if (threads == 1) {
        for (int i = 0; i < nq; ++i) {
          p.queries = &qs[i];
          p.n_queries = 1;
          be.Attention(p);
        }
      } else {
        p.queries = qs.data();
        p.n_queries = nq;
        be.Attention(p);
      }
    }
    EXPECT_EQ(alone, batched) << "batched attention differs from queries alone, "
                              << CpuIsaName(isa);
    EXPECT_EQ(alone, batched3) << "attention depends on the thread count, " << CpuIsaName(isa);
    std::vector<double> want(alone.size());
    for (int i = 0; i < nq; ++i) {
      const auto& blocks = tables[query_seq[i]];
      for (int h = 0; h < n_heads; ++h) {
        const int kvh = h / (n_heads / n_kv);
        const float* qh = q.data() + (i * n_heads + h) * hd;
        std::vector<double> s(query_ctx[i]);
        double mx = -1e300;
        for (int t = 0; t < query_ctx[i]; ++t) {
          const float* kr = k_pool.data() + ((blocks[t / bs] * n_kv + kvh) * bs + t % bs) * hd;
          double d = 0;
          for (int e = 0; e < hd; ++e) d += static_cast<double>(qh[e]) * kr[e];
          s[t] = d * scale;
          mx = std::max(mx, s[t]);
        }
        double sum = 0;
        for (auto& v : s) sum += (v = std::exp(v - mx));
        for (int e = 0; e < hd; ++e) {
          double acc = 0;
          for (int t = 0; t < query_ctx[i]; ++t) {
            acc += s[t] / sum * v_pool[((blocks[t / bs] * n_kv + kvh) * bs + t % bs) * hd + e];
          }
          want[(i * n_heads + h) * hd + e] = acc;
        }
      }
    }
    EXPECT_LT(NormalizedError(alone.data(), want), 1e-5) << CpuIsaName(isa);
  }
}

// An F16 KV cache: StoreKv rounds each element as FloatToFp16, and attention over it is,
// bit for bit, the F32 kernel over the same values widened back to F32, on every ISA, at
// head sizes that take each kernel's paths (64 and 128: the query kept in registers; 40:
// any multiple of 8; 20: AVX-512 hands it to AVX2), with block ends that are not multiples
// of 8, alone or batched over threads. AVX2 and AVX-512 agree bit for bit on it too.
TEST(Attention, F16CacheIsTheF32KernelOnTheRoundedCache) {
  struct Shape {
    int n_heads, n_kv, hd, bs;
  };
  for (const Shape sh :
       {Shape{8, 2, 64, 16}, Shape{4, 1, 128, 12}, Shape{6, 3, 40, 16}, Shape{2, 2, 20, 8}}) {
    const int kv = sh.n_kv * sh.hd, pool_blocks = 12;
    const int64_t rows = static_cast<int64_t>(pool_blocks) * sh.bs;
    const auto k_src = Random(rows * kv, 11), v_src = Random(rows * kv, 12);
    // The cache written through StoreKv, rows in a scattered order.
    std::vector<int64_t> slot(rows);
    for (int64_t i = 0; i < rows; ++i) slot[i] = (i * 7) % rows;  // rows is not a multiple of 7
    std::vector<uint16_t> k16(rows * kv), v16(rows * kv);
    std::vector<float> k32(rows * kv), v32(rows * kv);  // the F16 values, widened
    {
      CpuBackend be(CpuBackendOptions{});
      be.StoreKv(k_src.data(), v_src.data(), slot.data(), rows,
                 KvLayout{sh.n_kv, sh.hd, sh.bs, TensorType::kF16}, k16.data(), v16.data());
    }
    // Element e of head h of slot row r lies at ((r / bs * n_kv + h) * bs + r % bs) * hd + e.
    for (int64_t i = 0; i < rows; ++i) {
      for (int h = 0; h < sh.n_kv; ++h) {
        for (int e = 0; e < sh.hd; ++e) {
          const int64_t at =
              ((slot[i] / sh.bs * sh.n_kv + h) * sh.bs + slot[i] % sh.bs) * sh.hd + e;
          ASSERT_EQ(k16[at], FloatToFp16(k_src[i * kv + h * sh.hd + e]));
          ASSERT_EQ(v16[at], FloatToFp16(v_src[i * kv + h * sh.hd + e]));
          k32[at] = Fp16ToFloat(k16[at]);
          v32[at] = Fp16ToFloat(v16[at]);
        }
      }
    }
    const std::vector<std::vector<int32_t>> tables = {{5, 2, 11, 0}, {9}, {3, 4, 6, 7, 8, 10}};
    const std::vector<int32_t> ctx = {3 * sh.bs + 5, sh.bs - 3, 6 * sh.bs - 1};
    const int nq = 3;
    const auto q = Random(static_cast<int64_t>(nq) * sh.n_heads * sh.hd, 13);
    std::vector<float> avx2_out, avx512_out;
    for (CpuIsa isa : AvailableIsas()) {
      for (int threads : {1, 2}) {
        CpuBackendOptions opt;
        opt.max_isa = isa;
        opt.threads = threads;
        CpuBackend be(opt);
        std::vector<float> from16(static_cast<size_t>(nq) * sh.n_heads * sh.hd, -1.0f);
        std::vector<float> from32(from16.size(), -2.0f);
        auto run = [&](const void* kp, const void* vp, TensorType type, float* out) {
          std::vector<AttentionQuery> qs(nq);
          for (int i = 0; i < nq; ++i) {
            qs[i] = {q.data() + i * sh.n_heads * sh.hd, out + i * sh.n_heads * sh.hd,
                     tables[i].data(), ctx[i]};
          }
          AttentionParams p{sh.n_heads, sh.n_kv, sh.hd, 0.2f, sh.bs, kp, vp, qs.data(), nq};
          p.kv_type = type;
          be.Attention(p);
        };
        run(k16.data(), v16.data(), TensorType::kF16, from16.data());
        run(k32.data(), v32.data(), TensorType::kF32, from32.data());
        EXPECT_EQ(from16, from32) << CpuIsaName(isa) << ", head size " << sh.hd << ", " << threads
                                  << " threads";
        if (isa == CpuIsa::kAvx2) avx2_out = from16;
        if (isa == CpuIsa::kAvx512) avx512_out = from16;
      }
    }
    if (!avx2_out.empty() && !avx512_out.empty()) {
      EXPECT_EQ(avx2_out, avx512_out) << "head size " << sh.hd;
    }
  }
}

// A prompt's queries go to the kernels in tiles of up to kAttentionTile positions of one
// sequence, which walk the KV blocks once for the tile: every query's result is, bit for
// bit, the one it gets alone, on every ISA, F32 and F16 caches, over tiles that are full,
// partial, broken by another sequence's query, with positions in any order and contexts
// that end inside a block; AVX2 and AVX-512 agree on them.
TEST(Attention, PromptTilesAreTheQueriesAlone) {
  struct Shape {
    int n_heads, n_kv, hd, bs;
  };
  for (const Shape sh : {Shape{32, 4, 64, 32}, Shape{6, 2, 40, 16}, Shape{4, 1, 128, 12},
                         Shape{2, 2, 20, 8}, Shape{5, 1, 64, 16}}) {
    const int kv = sh.n_kv * sh.hd, pool_blocks = 16;
    const int64_t pool = static_cast<int64_t>(pool_blocks) * sh.bs * kv;
    const auto k32 = Random(pool, 21), v32 = Random(pool, 22);
    std::vector<uint16_t> k16(pool), v16(pool);
    for (int64_t i = 0; i < pool; ++i) {
      k16[i] = FloatToFp16(k32[i]);
      v16[i] = FloatToFp16(v32[i]);
    }
    const std::vector<int32_t> prompt_table = {9, 2, 14, 0, 7, 11, 4, 12};
    const std::vector<int32_t> other_table = {5, 3};
    // The prompt's positions 0..36 (three tiles, the last partial), another sequence's
    // decode query between positions 20 and 21, then positions in a shuffled order.
    std::vector<AttentionQuery> qs;
    std::vector<int32_t> ctx;
    std::vector<const int32_t*> table;
    for (int32_t pos = 0; pos < 37; ++pos) {
      ctx.push_back(pos + 1);
      table.push_back(prompt_table.data());
      if (pos == 20) {
        ctx.push_back(sh.bs + 3);
        table.push_back(other_table.data());
      }
    }
    for (int32_t c : {5 * sh.bs + 1, 3, 4 * sh.bs, 2 * sh.bs + 7, 1, 6 * sh.bs - 2}) {
      ctx.push_back(c);
      table.push_back(prompt_table.data());
    }
    const int nq = static_cast<int>(ctx.size());
    const int64_t q_floats = static_cast<int64_t>(sh.n_heads) * sh.hd;
    const auto q = Random(nq * q_floats, 23);
    std::map<CpuIsa, std::vector<float>> tiled_by_isa;
    for (const TensorType type : {TensorType::kF32, TensorType::kF16}) {
      const void* kp = type == TensorType::kF16 ? static_cast<const void*>(k16.data()) : k32.data();
      const void* vp = type == TensorType::kF16 ? static_cast<const void*>(v16.data()) : v32.data();
      for (CpuIsa isa : AvailableIsas()) {
        std::vector<float> alone(nq * q_floats, -1.0f);
        for (int threads : {1, 2}) {
          CpuBackendOptions opt;
          opt.max_isa = isa;
          opt.threads = threads;
          CpuBackend be(opt);
          std::vector<float> tiled(nq * q_floats, -2.0f);
          auto query = [&](int i, std::vector<float>& out) {
            return AttentionQuery{q.data() + i * q_floats, out.data() + i * q_floats, table[i],
                                  ctx[i]};
          };
          AttentionParams p{sh.n_heads, sh.n_kv, sh.hd, 0.2f, sh.bs, kp, vp, nullptr, 0};
          p.kv_type = type;
          if (threads == 1) {
            for (int i = 0; i < nq; ++i) {
              const AttentionQuery one = query(i, alone);
              p.queries = &one;
              p.n_queries = 1;
              be.Attention(p);
            }
          }
          for (int i = 0; i < nq; ++i) qs.push_back(query(i, tiled));
          p.queries = qs.data();
          p.n_queries = nq;
          be.Attention(p);
          qs.clear();
          ASSERT_EQ(tiled, alone) << CpuIsaName(isa) << ", " << TensorTypeName(type) << ", heads "
                                  << sh.n_heads << "/" << sh.n_kv << ", head size " << sh.hd << ", "
                                  << threads << " threads";
          if (type == TensorType::kF16) tiled_by_isa[isa] = tiled;
        }
      }
    }
    if (tiled_by_isa.count(CpuIsa::kAvx2) != 0 && tiled_by_isa.count(CpuIsa::kAvx512) != 0) {
      EXPECT_EQ(tiled_by_isa[CpuIsa::kAvx2], tiled_by_isa[CpuIsa::kAvx512])
          << "head size " << sh.hd;
    }
  }
}

// RmsNorm, Rope and SiluMul on every path against float64, and invariant to the batch.
TEST(ElementwiseKernels, MatchReferenceOnEveryPath) {
  const int64_t n = 5, dim = 100;
  const auto x = Random(n * dim, 4), w = Random(dim, 5), u = Random(n * dim, 6);
  for (CpuIsa isa : AvailableIsas()) {
    CpuBackendOptions opt;
    opt.max_isa = isa;
    CpuBackend be(opt);
    std::vector<float> out(n * dim), one(dim);
    be.RmsNorm(x.data(), w.data(), n, dim, 1e-5f, out.data());
    for (int64_t i = 0; i < n; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < dim; ++j) ss += static_cast<double>(x[i * dim + j]) * x[i * dim + j];
      const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
      for (int64_t j = 0; j < dim; ++j) {
        EXPECT_NEAR(out[i * dim + j], x[i * dim + j] * inv * w[j], 1e-5) << CpuIsaName(isa);
      }
      be.RmsNorm(x.data() + i * dim, w.data(), 1, dim, 1e-5f, one.data());
      EXPECT_EQ(std::memcmp(one.data(), out.data() + i * dim, dim * sizeof(float)), 0);
    }
    be.SiluMul(x.data(), u.data(), n * dim, out.data());
    for (int64_t i = 0; i < n * dim; ++i) {
      const double g = x[i];
      EXPECT_NEAR(out[i], g / (1 + std::exp(-g)) * u[i], 1e-5 * (1 + std::fabs(u[i])));
    }
    // The vectorized exp across its whole range, saturation included (relative 1e-6).
    std::vector<float> g, ones;
    for (float v = -120.0f; v <= 120.0f; v += 0.37f) g.push_back(v);
    g.push_back(0.0f);
    ones.assign(g.size(), 1.0f);
    std::vector<float> s(g.size());
    be.SiluMul(g.data(), ones.data(), static_cast<int64_t>(g.size()), s.data());
    for (size_t i = 0; i < g.size(); ++i) {
      const double want = g[i] / (1 + std::exp(-static_cast<double>(g[i])));
      EXPECT_NEAR(s[i], want, 1e-6 * std::fabs(want) + 1e-30) << g[i] << " " << CpuIsaName(isa);
    }
    const int heads = 2, hd = 50;
    std::vector<float> freq(hd / 2);
    for (int j = 0; j < hd / 2; ++j) freq[j] = std::pow(10000.0f, -2.0f * j / hd);
    const std::vector<int32_t> pos = {0, 1, 17, 300, 4095};
    for (RopeLayout layout : {RopeLayout::kAdjacentPairs, RopeLayout::kHalves}) {
      auto r = x;
      be.Rope(r.data(), pos.data(), n, heads, hd, hd, layout, freq.data());
      for (int64_t i = 0; i < n; ++i) {
        for (int h = 0; h < heads; ++h) {
          const float* v0 = x.data() + (i * heads + h) * hd;
          const float* v1 = r.data() + (i * heads + h) * hd;
          for (int j = 0; j < hd / 2; ++j) {
            const int a = layout == RopeLayout::kAdjacentPairs ? 2 * j : j;
            const int b = layout == RopeLayout::kAdjacentPairs ? 2 * j + 1 : j + hd / 2;
            const double th = static_cast<double>(pos[i]) * freq[j];
            EXPECT_NEAR(v1[a], v0[a] * std::cos(th) - v0[b] * std::sin(th), 1e-5);
            EXPECT_NEAR(v1[b], v0[a] * std::sin(th) + v0[b] * std::cos(th), 1e-5);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace cascade
