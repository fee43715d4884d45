#include "serving/ngram_drafter.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(NgramDrafter, ProposesWhatFollowedTheLatestEarlierOccurrence) {
  // ... 7 8 9 [1 2 3] 4 5 6 ... 1 2 3 -> 4 5 (k = 2)
  const std::vector<int32_t> t = {7, 8, 9, 1, 2, 3, 4, 5, 6, 10, 1, 2, 3};
  EXPECT_THAT(DraftByLookup(t, 2), ElementsAre(4, 5));
  // The latest occurrence wins: 1 2 3 was followed by 4 first and by 11 later.
  const std::vector<int32_t> twice = {1, 2, 3, 4, 0, 1, 2, 3, 11, 12, 0, 1, 2, 3};
  EXPECT_THAT(DraftByLookup(twice, 3), ElementsAre(11, 12, 0));
}

TEST(NgramDrafter, PrefersTheLongestMatchAndFallsBackToShorterOnes) {
  // The last 3 (5 6 7) never occurred; the last 2 (6 7) did, followed by 8.
  const std::vector<int32_t> t = {6, 7, 8, 9, 4, 6, 1, 5, 6, 7};
  EXPECT_THAT(DraftByLookup(t, 4), ElementsAre(8, 9, 4, 6));
  // Only the last token (7) recurs when n = 1 is allowed; not when min_ngram is 2.
  const std::vector<int32_t> u = {7, 3, 4, 9, 7};
  EXPECT_THAT(DraftByLookup(u, 2), ElementsAre(3, 4));
  EXPECT_THAT(DraftByLookup(u, 2, {.max_ngram = 3, .min_ngram = 2}), IsEmpty());
}

TEST(NgramDrafter, NeverRunsPastTheEndAndDraftsNothingWithoutAMatch) {
  // 5 5 5: the tail 5 5 occurs at 0, followed only by one 5 before the end.
  EXPECT_THAT(DraftByLookup(std::vector<int32_t>{5, 5, 5}, 4), ElementsAre(5));
  EXPECT_THAT(DraftByLookup(std::vector<int32_t>{1, 2, 3, 4}, 4), IsEmpty());
  EXPECT_THAT(DraftByLookup(std::vector<int32_t>{}, 4), IsEmpty());
  EXPECT_THAT(DraftByLookup(std::vector<int32_t>{1, 2, 1, 2}, 0), IsEmpty());
}

}  // namespace
}  // namespace cascade
