#include "util/utf8.h"

#include "gtest/gtest.h"

namespace cascade {
namespace {

TEST(Utf8, DecodeAndEncode) {
  const std::string s = "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";  // a é € 😀
  int len;
  EXPECT_EQ(DecodeUtf8(s, 0, &len), 'a');
  EXPECT_EQ(DecodeUtf8(s, 1, &len), 0xe9);
  EXPECT_EQ(len, 2);
  EXPECT_EQ(DecodeUtf8(s, 3, &len), 0x20ac);
  EXPECT_EQ(DecodeUtf8(s, 6, &len), 0x1f600);
  std::string out;
  for (int cp : {0x61, 0xe9, 0x20ac, 0x1f600}) AppendUtf8(cp, &out);
  EXPECT_EQ(out, s);
  EXPECT_EQ(SplitUtf8(s).size(), 4u);
}

TEST(Utf8, RejectsInvalid) {
  int len;
  EXPECT_EQ(DecodeUtf8("\xc0\xaf", 0, &len), -1);      // overlong
  EXPECT_EQ(DecodeUtf8("\xed\xa0\x80", 0, &len), -1);  // surrogate
  EXPECT_EQ(DecodeUtf8("\xe2\x82", 0, &len), -1);      // truncated
  EXPECT_FALSE(IsValidUtf8("ab\xff"));
  EXPECT_TRUE(IsValidUtf8("ab\xc3\xa9"));
}

TEST(Utf8, IncompleteSuffix) {
  EXPECT_EQ(IncompleteUtf8Suffix("abc"), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("ab\xe2"), 1u);
  EXPECT_EQ(IncompleteUtf8Suffix("ab\xe2\x82"), 2u);
  EXPECT_EQ(IncompleteUtf8Suffix("ab\xe2\x82\xac"), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("\xf0\x9f\x98"), 3u);
}

}  // namespace
}  // namespace cascade
