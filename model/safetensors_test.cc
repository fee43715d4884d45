#include "model/safetensors.h"

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> Build(const std::string& header, size_t data_bytes) {
  const uint64_t n = header.size();
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

TEST(Safetensors, ParsesValidFile) {
  auto bytes = Build(
      R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},"__metadata__":{"format":"pt"}})",
      32);
  auto f = SafetensorsFile::Parse(bytes, "m.safetensors");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->tensors().size(), 2u);
  const auto* a = (*f)->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->nbytes, 24u);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
}

struct BadCase {
  std::string header;
  size_t data;
  std::string expect;
};

TEST(Safetensors, RejectsCorruptHeaders) {
  const BadCase cases[] = {
      {R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})", 24, "not valid JSON"},
      {R"([1,2])", 0, "not a JSON object"},
      {R"({"a":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})", 8, "unknown dtype"},
      {R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24, "needs 24"},
      {R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 10, "past the end"},
      {R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "non-negative"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, "end before"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       16, "overlap"},
      {R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]}})", 4,
       "absurdly large"},
      {R"({"a":{"dtype":"F32","shape":[2]}})", 8, "data_offsets missing"},
  };
  for (const auto& c : cases) {
    auto bytes = Build(c.header, c.data);
    auto f = SafetensorsFile::Parse(bytes, "bad.safetensors");
    ASSERT_FALSE(f.ok()) << c.header;
    EXPECT_THAT(f.status().message(), HasSubstr(c.expect)) << c.header;
    EXPECT_THAT(f.status().message(), HasSubstr("bad.safetensors"));
  }
}

TEST(Safetensors, RejectsHeaderLengthPastEnd) {
  std::vector<uint8_t> bytes(16, 0);
  uint64_t n = 1000;
  std::memcpy(bytes.data(), &n, 8);
  auto f = SafetensorsFile::Parse(bytes, "x");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("runs past the end"));
}

}  // namespace
}  // namespace cascade
