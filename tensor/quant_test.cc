#include "tensor/quant.h"

#include <cmath>
#include <random>
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
  // and more bits means less error
  EXPECT_LT(RoundTripError(TensorType::kQ6_K, x), RoundTripError(TensorType::kQ5_K, x));
  EXPECT_LT(RoundTripError(TensorType::kQ5_K, x), RoundTripError(TensorType::kQ4_K, x));
}

TEST(Quant, ZeroRowsStayZero) {
  std::vector<float> z(256, 0.0f);
  for (TensorType t : {TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_K, TensorType::kQ5_K,
                       TensorType::kQ6_K}) {
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

}  // namespace
}  // namespace cascade
