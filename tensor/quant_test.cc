#include "tensor/quant.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "util/fp16.h"

namespace cascade {
namespace {

std::vector<float> RandomRow(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Normalized RMS error of a round trip through `type`.
double RoundTripError(TensorType type, const std::vector<float>& x) {
  uint64_t bytes;
  EXPECT_TRUE(RowBytes(type, x.size(), &bytes));
  std::vector<uint8_t> q(bytes);
  EXPECT_TRUE(QuantizeRow(type, x.data(), x.size(), q.data()));
  std::vector<float> y(x.size());
  EXPECT_TRUE(DequantizeRow(type, q.data(), x.size(), y.data()));
  double err = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (x[i] - y[i]) * (x[i] - y[i]);
    norm += x[i] * x[i];
  }
  return std::sqrt(err / norm);
}

TEST(Quant, RoundTripErrorWithinTypeBounds) {
  const auto x = RandomRow(4096, 7);
  // Bounds: a few times the ideal uniform-quantizer error of each format.
  EXPECT_LT(RoundTripError(TensorType::kF16, x), 1e-3);
  EXPECT_LT(RoundTripError(TensorType::kBF16, x), 5e-3);
  EXPECT_LT(RoundTripError(TensorType::kQ8_0, x), 0.01);
  EXPECT_LT(RoundTripError(TensorType::kQ6_K, x), 0.03);
  EXPECT_LT(RoundTripError(TensorType::kQ5_K, x), 0.05);
  EXPECT_LT(RoundTripError(TensorType::kQ4_K, x), 0.1);
  EXPECT_LT(RoundTripError(TensorType::kQ4_0, x), 0.15);
  EXPECT_LT(RoundTripError(TensorType::kQ5_0, x), 0.06);
  EXPECT_LT(RoundTripError(TensorType::kQ5_1, x), 0.05);
  EXPECT_LT(RoundTripError(TensorType::kQ4_1, x), 0.12);
  // and more bits means less error
  EXPECT_LT(RoundTripError(TensorType::kQ6_K, x), RoundTripError(TensorType::kQ5_K, x));
  EXPECT_LT(RoundTripError(TensorType::kQ5_K, x), RoundTripError(TensorType::kQ4_K, x));
  EXPECT_LT(RoundTripError(TensorType::kQ5_1, x), RoundTripError(TensorType::kQ4_1, x));
  EXPECT_LT(RoundTripError(TensorType::kQ5_0, x), RoundTripError(TensorType::kQ4_0, x));
  // a minimum per block fits a shifted row better than a symmetric scale
  std::vector<float> shifted = x;
  for (float& v : shifted) v += 2.0f;
  EXPECT_LT(RoundTripError(TensorType::kQ4_1, shifted), RoundTripError(TensorType::kQ4_0, shifted));
  EXPECT_LT(RoundTripError(TensorType::kQ5_1, shifted), RoundTripError(TensorType::kQ5_0, shifted));
  EXPECT_LT(RoundTripError(TensorType::kQ3_K, x), 0.2);
  EXPECT_LT(RoundTripError(TensorType::kQ2_K, x), 0.4);
  EXPECT_LT(RoundTripError(TensorType::kQ4_K, x), RoundTripError(TensorType::kQ3_K, x));
  EXPECT_LT(RoundTripError(TensorType::kQ3_K, x), RoundTripError(TensorType::kQ2_K, x));
  // The non-uniform levels of IQ4_NL fit normal weights better than Q4_0's even grid, and
  // IQ4_XS's 6-bit sub-block scales cost it little.
  EXPECT_LT(RoundTripError(TensorType::kIQ4_NL, x), 0.1);
  EXPECT_LT(RoundTripError(TensorType::kIQ4_XS, x), 0.1);
  EXPECT_LT(RoundTripError(TensorType::kIQ4_NL, x), RoundTripError(TensorType::kQ4_0, x));
  EXPECT_LT(RoundTripError(TensorType::kIQ4_XS, x), RoundTripError(TensorType::kQ4_0, x));
  for (TensorType t : {TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ3_K,
                       TensorType::kQ2_K, TensorType::kQ4_0, TensorType::kIQ4_NL,
                       TensorType::kIQ4_XS}) {
    std::printf("[ %s ] round trip normalized RMS error %.4f (N(0,1)), %.4f (N(2,1))\n",
                TensorTypeName(t), RoundTripError(t, x), RoundTripError(t, shifted));
  }
}

TEST(Quant, ZeroRowsStayZero) {
  std::vector<float> z(256, 0.0f);
  for (TensorType t : {TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0,
                       TensorType::kQ5_1, TensorType::kQ2_K, TensorType::kQ3_K, TensorType::kQ4_K,
                       TensorType::kQ5_K, TensorType::kQ6_K, TensorType::kIQ4_NL,
                       TensorType::kIQ4_XS}) {
    uint64_t bytes;
    ASSERT_TRUE(RowBytes(t, 256, &bytes));
    std::vector<uint8_t> q(bytes);
    ASSERT_TRUE(QuantizeRow(t, z.data(), 256, q.data()));
    std::vector<float> y(256, 1.0f);
    ASSERT_TRUE(DequantizeRow(t, q.data(), 256, y.data()));
    for (float v : y) EXPECT_EQ(v, 0.0f) << TensorTypeName(t);
  }
}

TEST(Quant, DecodesHandBuiltBlocks) {
  BlockQ4_0 b4{};
  b4.d = FloatToFp16(0.5f);
  for (int j = 0; j < 16; ++j) b4.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  DequantizeQ4_0(&b4, 32, y);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f);
    EXPECT_EQ(y[j + 16], (15 - j - 8) * 0.5f);
  }
  BlockQ4K bk{};
  bk.d = FloatToFp16(1.0f);
  bk.dmin = FloatToFp16(1.0f);
  // sub-block 0: scale 2, min 1; sub-block 5: scale 3 | (1 << 4) = 19, min 4 | (2 << 4) = 36
  bk.scales[0] = 2;
  bk.scales[4] = 1;
  bk.scales[9] = 3 | (4 << 4);
  bk.scales[1] |= 1 << 6;                         // high bits of scale 5
  bk.scales[5] |= 2 << 6;                         // high bits of min 5
  for (int l = 0; l < 128; ++l) bk.qs[l] = 0x57;  // low nibble 7, high nibble 5
  std::vector<float> yk(256);
  DequantizeQ4K(&bk, 256, yk.data());
  EXPECT_EQ(yk[0], 2 * 7 - 1);         // sub-block 0 uses low nibbles of qs[0..32)
  EXPECT_EQ(yk[5 * 32], 19 * 5 - 36);  // sub-block 5: high nibbles of qs[64..96)
}

// Hand-built 32-element blocks decoded as the formats define them: Q4_1 q*d + m, Q5_0
// (q - 16)*d and Q5_1 q*d + m, with element j's fifth bit at bit j of the little-endian qh.
TEST(Quant, DecodesHandBuiltLegacyBlocks) {
  uint8_t qs[16];
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const uint8_t qh[4] = {0x01, 0x80, 0x00, 0xC0};  // fifth bit set: elements 0, 15, 30, 31
  auto code = [&](int j) { return j < 16 ? j : 15 - (j - 16); };
  auto high = [&](int j) { return (j == 0 || j == 15 || j == 30 || j == 31) ? 16 : 0; };
  float y[32];
  BlockQ4_1 b41{};
  b41.d = FloatToFp16(0.5f);
  b41.m = FloatToFp16(-3.0f);
  std::memcpy(b41.qs, qs, 16);
  DequantizeQ4_1(&b41, 32, y);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], code(j) * 0.5f - 3.0f) << j;
  BlockQ5_0 b50{};
  b50.d = FloatToFp16(0.25f);
  std::memcpy(b50.qs, qs, 16);
  std::memcpy(b50.qh, qh, 4);
  DequantizeQ5_0(&b50, 32, y);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (code(j) + high(j) - 16) * 0.25f) << j;
  BlockQ5_1 b51{};
  b51.d = FloatToFp16(2.0f);
  b51.m = FloatToFp16(1.5f);
  std::memcpy(b51.qs, qs, 16);
  std::memcpy(b51.qh, qh, 4);
  DequantizeQ5_1(&b51, 32, y);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (code(j) + high(j)) * 2.0f + 1.5f) << j;
  // The generic entry point decodes the same bytes.
  float z[32];
  ASSERT_TRUE(DequantizeRow(TensorType::kQ5_1, &b51, 32, z));
  EXPECT_EQ(std::memcmp(y, z, sizeof(y)), 0);
}

// Values on a type's grid come back exactly: quantizing a dequantized block reproduces it.
TEST(Quant, LegacyGridValuesRoundTripExactly) {
  for (TensorType t : {TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1}) {
    const auto x = RandomRow(256, 3);
    uint64_t bytes;
    ASSERT_TRUE(RowBytes(t, 256, &bytes));
    std::vector<uint8_t> q(bytes), q2(bytes);
    ASSERT_TRUE(QuantizeRow(t, x.data(), 256, q.data()));
    std::vector<float> y(256), y2(256);
    ASSERT_TRUE(DequantizeRow(t, q.data(), 256, y.data()));
    ASSERT_TRUE(QuantizeRow(t, y.data(), 256, q2.data()));
    ASSERT_TRUE(DequantizeRow(t, q2.data(), 256, y2.data()));
    double worst = 0, scale = 0;
    for (int i = 0; i < 256; ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - y2[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(y[i])));
    }
    // Scales are rounded to fp16 on the way in, so allow their rounding, not a step.
    EXPECT_LT(worst, 2e-3 * scale) << TensorTypeName(t);
  }
}

// Hand-built Q2_K and Q3_K super-blocks: element e = 128h + 32j + l takes the 2 bits at 2j
// of qs[32h + l] and sub-block e / 16; Q2_K d*(sc & 15)*q - dmin*(sc >> 4); Q3_K
// d*(scale - 32)*(q - 4 unless bit e/32 of hmask[e % 32] is set), with 6-bit scales split
// into low nibbles (scales[i % 8], nibble i / 8) and high pairs (scales[8 + i % 4], bits
// 2*(i / 4)).
TEST(Quant, DecodesHandBuiltLowBitKBlocks) {
  BlockQ2K b2{};
  b2.d = FloatToFp16(0.5f);
  b2.dmin = FloatToFp16(0.25f);
  for (int g = 0; g < 16; ++g) b2.scales[g] = static_cast<uint8_t>((g % 16) | ((15 - g) << 4));
  for (int i = 0; i < 64; ++i) b2.qs[i] = 0xE4;  // codes 0, 1, 2, 3 at bits 0, 2, 4, 6
  std::vector<float> y(256);
  DequantizeQ2K(&b2, 256, y.data());
  for (int e = 0; e < 256; ++e) {
    const int j = (e % 128) / 32, g = e / 16;
    EXPECT_EQ(y[e], 0.5f * g * j - 0.25f * (15 - g)) << e;
  }
  BlockQ3K b3{};
  b3.d = FloatToFp16(2.0f);
  // scale 5 = 37 - 32: low nibble 5 (scales[5] low), high pair 2 (scales[9] bits 2-3);
  // scale 12 = 20 - 32: low nibble 4 (scales[4] high), high pair 1 (scales[8] bits 6-7).
  b3.scales[5] = 5;
  b3.scales[9] = 2 << 2;
  b3.scales[4] = 4 << 4;
  b3.scales[8] = 1 << 6;
  for (int i = 0; i < 64; ++i) b3.qs[i] = 0xE4;
  b3.hmask[3] = 1 << 2;  // element 64 + 3 (h 0, j 2, l 3): high bit set
  DequantizeQ3K(&b3, 256, y.data());
  EXPECT_EQ(GetScaleQ3K(5, b3.scales), 5);
  EXPECT_EQ(GetScaleQ3K(12, b3.scales), -12);
  EXPECT_EQ(GetScaleQ3K(0, b3.scales), -32);
  EXPECT_EQ(y[5 * 16 + 2], 2.0f * 5 * (2 - 4));  // sub-block 5 = h 0, j 2, l 16..31
  EXPECT_EQ(y[64 + 3], 2.0f * -32 * 2);          // hmask bit set: code 2, no -4
  EXPECT_EQ(y[12 * 16], 2.0f * -12 * (2 - 4));   // sub-block 12 = h 1, j 2
  EXPECT_EQ(y[0], 2.0f * -32 * (0 - 4));
}

// Hand-built IQ4 blocks decoded as the formats define them: IQ4_NL d * level[q]; IQ4_XS
// (d * (scale - 32)) * level[q] with sub-block s's 6-bit scale split over scales_l and
// scales_h.
TEST(Quant, DecodesHandBuiltIq4Blocks) {
  BlockIQ4NL nl{};
  nl.d = FloatToFp16(0.25f);
  for (int j = 0; j < 16; ++j) nl.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  DequantizeIQ4NL(&nl, 32, y);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * kIq4Levels[j]);
    EXPECT_EQ(y[j + 16], 0.25f * kIq4Levels[15 - j]);
  }
  BlockIQ4XS xs{};
  xs.d = FloatToFp16(0.5f);
  // sub-block 0: scale 5 (low 5, high 0); sub-block 3: 0x2A = 42 (low 10, high 2);
  // sub-block 6: 63 (low 15, high 3)
  xs.scales_l[0] = 5;
  xs.scales_l[1] = 10 << 4;
  xs.scales_l[3] = 15;
  xs.scales_h = static_cast<uint16_t>((2 << 6) | (3 << 12));
  for (int l = 0; l < 128; ++l) xs.qs[l] = static_cast<uint8_t>((l % 16) | (3 << 4));
  std::vector<float> yx(256);
  DequantizeIQ4XS(&xs, 256, yx.data());
  EXPECT_EQ(Iq4XsScale(xs, 3), 42);
  EXPECT_EQ(yx[0], 0.5f * (5 - 32) * kIq4Levels[0]);
  EXPECT_EQ(yx[3 * 32 + 7], 0.5f * (42 - 32) * kIq4Levels[7]);
  EXPECT_EQ(yx[3 * 32 + 16 + 7], 0.5f * (42 - 32) * kIq4Levels[3]);
  EXPECT_EQ(yx[6 * 32 + 1], 0.5f * (63 - 32) * kIq4Levels[1]);
  EXPECT_EQ(yx[7 * 32], 0.5f * (0 - 32) * kIq4Levels[0]);  // scale bits all clear
}

// Blocks that ggml itself encoded and decoded (tensor/testdata/ggml_blocks.sh, llama.cpp
// 80fb11a): our dequantization gives ggml's floats bit for bit; our quantizer, on the same
// input, gives ggml's blocks exactly for Q4_1/Q5_0/Q5_1 (the same reference algorithm)
// and, for Q2_K/Q3_K/IQ4_NL/IQ4_XS (whose scale searches differ), an error within 10% of
// ggml's.
TEST(Quant, DecodesGgmlsBlocksBitForBit) {
  constexpr int kN = 512;
  std::vector<float> x(kN);
  for (int i = 0; i < kN; ++i) x[i] = std::sin(0.37f * i + 0.1f) * (1.0f + (i % 7) / 3.0f);
  for (const auto& [type, file] :
       {std::pair{TensorType::kQ4_1, "q4_1"}, std::pair{TensorType::kQ5_0, "q5_0"},
        std::pair{TensorType::kQ5_1, "q5_1"}, std::pair{TensorType::kQ2_K, "q2_K"},
        std::pair{TensorType::kQ3_K, "q3_K"}, std::pair{TensorType::kIQ4_NL, "iq4_nl"},
        std::pair{TensorType::kIQ4_XS, "iq4_xs"}}) {
    std::ifstream in(std::string(CASCADE_SOURCE_DIR) + "/tensor/testdata/" + file + ".ggml",
                     std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    uint64_t rb;
    ASSERT_TRUE(RowBytes(type, kN, &rb));
    ASSERT_EQ(bytes.size(), rb + kN * sizeof(float)) << file;
    std::vector<float> want(kN), got(kN), ours_dq(kN);
    std::memcpy(want.data(), bytes.data() + rb, kN * sizeof(float));
    ASSERT_TRUE(DequantizeRow(type, bytes.data(), kN, got.data()));
    EXPECT_EQ(std::memcmp(got.data(), want.data(), kN * sizeof(float)), 0)
        << file << ": our decoding of ggml's blocks differs from ggml's";
    std::vector<uint8_t> ours(rb);
    ASSERT_TRUE(QuantizeRow(type, x.data(), kN, ours.data()));
    ASSERT_TRUE(DequantizeRow(type, ours.data(), kN, ours_dq.data()));
    double err_ggml = 0, err_ours = 0;
    for (int i = 0; i < kN; ++i) {
      err_ggml += (x[i] - want[i]) * (x[i] - want[i]);
      err_ours += (x[i] - ours_dq[i]) * (x[i] - ours_dq[i]);
    }
    std::printf("[ %s ] squared error: ggml %.4f, ours %.4f\n", file, err_ggml, err_ours);
    if (type == TensorType::kQ4_1 || type == TensorType::kQ5_0 || type == TensorType::kQ5_1) {
      EXPECT_EQ(std::memcmp(ours.data(), bytes.data(), rb), 0) << file << ": blocks differ";
    } else {
      EXPECT_LT(err_ours, 1.1 * err_ggml) << file;
    }
  }
}

}  // namespace
}  // namespace cascade
