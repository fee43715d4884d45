#include "util/secret.h"

#include <fstream>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace cascade {
namespace {

TEST(Secret, RandomSecretsAreHexOfTheAskedLengthAndDiffer) {
  std::set<std::string> seen;
  for (int i = 0; i < 50; ++i) {
    const std::string s = RandomSecret(16);
    ASSERT_EQ(s.size(), 32u);
    EXPECT_EQ(s.find_first_not_of("0123456789abcdef"), std::string::npos) << s;
    seen.insert(s);
  }
  EXPECT_EQ(seen.size(), 50u);
}

TEST(Secret, SecretsEqualComparesWholeStrings) {
  EXPECT_TRUE(SecretsEqual("abc", "abc"));
  EXPECT_TRUE(SecretsEqual("", ""));
  EXPECT_FALSE(SecretsEqual("abc", "abd"));
  EXPECT_FALSE(SecretsEqual("abc", "ab"));
  EXPECT_FALSE(SecretsEqual("", "a"));
}

TEST(Secret, BearerMatchesOnlyTheKeyUnderTheBearerScheme) {
  EXPECT_TRUE(BearerMatches("Bearer k3y", "k3y"));
  EXPECT_TRUE(BearerMatches("bearer k3y", "k3y"));  // the scheme's case does not matter
  EXPECT_TRUE(BearerMatches("BEARER k3y", "k3y"));
  EXPECT_FALSE(BearerMatches("Bearer K3Y", "k3y"));  // the key's does
  EXPECT_FALSE(BearerMatches("k3y", "k3y"));
  EXPECT_FALSE(BearerMatches("Basic k3y", "k3y"));
  EXPECT_FALSE(BearerMatches("Bearer k3y ", "k3y"));
  EXPECT_FALSE(BearerMatches("Bearer ", "k3y"));
  EXPECT_FALSE(BearerMatches("", "k3y"));
  EXPECT_FALSE(BearerMatches("Bearerk3y", "k3y"));
  EXPECT_FALSE(BearerMatches("Bearer ", ""));  // an empty key matches nothing
}

TEST(Secret, ReadSecretFileStripsWhitespaceAndRefusesEmptyOrMissingFiles) {
  const std::string path = ::testing::TempDir() + "/cascade_secret_test";
  std::ofstream(path) << "  s3cret\n";
  auto got = ReadSecretFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "s3cret");
  std::ofstream(path) << " \n";
  auto empty = ReadSecretFile(path);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find(path), std::string::npos) << empty.status();
  auto missing = ReadSecretFile(path + ".absent");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(path + ".absent"), std::string::npos)
      << missing.status();
}

}  // namespace
}  // namespace cascade
