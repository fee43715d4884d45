#include "util/npy.h"

#include <cstdio>
#include <fstream>

#include "gtest/gtest.h"

namespace cascade {
namespace {

TEST(Npy, RoundTrip) {
  const std::string path = ::testing::TempDir() + "/rt.npy";
  std::vector<float> data = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> shape = {2, 3};
  ASSERT_TRUE(WriteNpyF32(path, shape, data).ok());
  auto arr = ReadNpyF32(path);
  ASSERT_TRUE(arr.ok()) << arr.status();
  EXPECT_EQ(arr->shape, shape);
  EXPECT_EQ(arr->data, data);
}

TEST(Npy, RejectsShortPayload) {
  const std::string path = ::testing::TempDir() + "/short.npy";
  std::vector<float> data = {1, 2, 3, 4};
  std::vector<int64_t> shape = {4};
  ASSERT_TRUE(WriteNpyF32(path, shape, data).ok());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes.resize(bytes.size() - 3);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  auto arr = ReadNpyF32(path);
  ASSERT_FALSE(arr.ok());
  EXPECT_NE(arr.status().message().find("payload"), std::string::npos) << arr.status();
}

TEST(Npy, ShapeMismatchOnWrite) {
  std::vector<float> data = {1, 2, 3};
  std::vector<int64_t> shape = {2, 2};
  EXPECT_FALSE(WriteNpyF32(::testing::TempDir() + "/x.npy", shape, data).ok());
}

}  // namespace
}  // namespace cascade
