#include "util/checked_math.h"

#include <limits>

#include "gtest/gtest.h"

namespace cascade {
namespace {

TEST(CheckedMath, DetectsOverflow) {
  uint64_t out;
  EXPECT_TRUE(CheckedAdd<uint64_t>(1, 2, &out));
  EXPECT_EQ(out, 3u);
  EXPECT_FALSE(CheckedAdd<uint64_t>(std::numeric_limits<uint64_t>::max(), 1, &out));
  EXPECT_FALSE(CheckedMul<uint64_t>(uint64_t{1} << 40, uint64_t{1} << 30, &out));
  EXPECT_TRUE(CheckedProduct({2, 3, 7}, &out));
  EXPECT_EQ(out, 42u);
  EXPECT_FALSE(CheckedProduct({uint64_t{1} << 32, uint64_t{1} << 32}, &out));
}

TEST(CheckedMath, RangeWithin) {
  EXPECT_TRUE(RangeWithin(0, 10, 10));
  EXPECT_FALSE(RangeWithin(1, 10, 10));
  EXPECT_FALSE(RangeWithin(std::numeric_limits<uint64_t>::max(), 2, 100));
  uint64_t a;
  EXPECT_TRUE(CheckedAlignUp(33, 32, &a));
  EXPECT_EQ(a, 64u);
  EXPECT_FALSE(CheckedAlignUp(std::numeric_limits<uint64_t>::max() - 3, 32, &a));
  EXPECT_FALSE(CheckedAlignUp(5, 0, &a));
}

}  // namespace
}  // namespace cascade
