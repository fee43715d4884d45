#include "util/fp16.h"

#include <bit>
#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace cascade {
namespace {

TEST(Fp16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Fp16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(f)))) << h;
      continue;
    }
    EXPECT_EQ(FloatToFp16(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(Fp16, KnownValues) {
  EXPECT_EQ(Fp16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(Fp16ToFloat(0xc000), -2.0f);
  EXPECT_EQ(Fp16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(FloatToFp16(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0);  // tie to even: zero
  EXPECT_EQ(FloatToFp16(std::ldexp(1.5f, -25)), 1);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0)
  EXPECT_EQ(FloatToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToFp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  const float halfway = std::bit_cast<float>(0x3f808000u);  // between 0x3f80 and 0x3f81
  EXPECT_EQ(FloatToBf16(halfway), 0x3f80);
  const float above = std::bit_cast<float>(0x3f808001u);
  EXPECT_EQ(FloatToBf16(above), 0x3f81);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace cascade
