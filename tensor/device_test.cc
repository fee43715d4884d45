#include "tensor/device.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

TEST(Device, ParsesEveryFormAndWritesItBack) {
  for (const char* s : {"auto", "cpu", "cuda:0", "cuda:3"}) {
    auto d = ParseDevice(s);
    ASSERT_TRUE(d.ok()) << s;
    EXPECT_EQ(DeviceName(*d), s);
  }
  auto cuda = ParseDevice("cuda");
  ASSERT_TRUE(cuda.ok());
  EXPECT_EQ(*cuda, (DeviceSpec{DeviceKind::kCuda, 0}));
  EXPECT_EQ(ParseDevice("cuda:7")->index, 7);
}

TEST(Device, RefusesWhatItDoesNotKnowNamingTheValue) {
  for (const char* s : {"", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "cuda:99999"}) {
    auto d = ParseDevice(s);
    ASSERT_FALSE(d.ok()) << s;
    EXPECT_THAT(d.status().message(), ::testing::HasSubstr(std::string("'") + s + "'"));
  }
}

}  // namespace
}  // namespace cascade
