#include "parallel/collective.h"

#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/inproc_collective.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

// Runs fn(rank) on one thread per rank of an in-process group of `n`.
template <typename Fn>
void OnEveryRank(InProcessGroup& g, Fn fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < g.size(); ++r) threads.emplace_back([&, r] { fn(g.rank(r)); });
  for (auto& t : threads) t.join();
}

TEST(InProcessGroup, AllGatherIsInRankOrder) {
  InProcessGroup g(4);
  std::vector<std::vector<int>> got(4);
  OnEveryRank(g, [&](Collective& c) {
    int mine[2] = {c.rank() * 10, c.rank() * 10 + 1};
    std::vector<int> all(8);
    ASSERT_TRUE(c.AllGather(mine, sizeof(mine), all.data()).ok());
    got[c.rank()] = all;
  });
  for (const auto& all : got) EXPECT_THAT(all, ::testing::ElementsAre(0, 1, 10, 11, 20, 21, 30, 31));
}

TEST(InProcessGroup, BroadcastFromAnyRoot) {
  InProcessGroup g(3);
  std::vector<int> got(3);
  OnEveryRank(g, [&](Collective& c) {
    int v = c.rank() == 2 ? 42 : -1;
    ASSERT_TRUE(c.Broadcast(&v, sizeof(v), 2).ok());
    got[c.rank()] = v;
  });
  EXPECT_THAT(got, ::testing::ElementsAre(42, 42, 42));
}

// The sum is taken in rank order whatever the count: each element's value depends on the
// ranks' values of that element only (the batch-invariance the stages rely on).
TEST(InProcessGroup, AllReduceSumsInRankOrderIndependentOfCount) {
  InProcessGroup g(4);
  const float parts[4] = {1e8f, 1.0f, -1e8f, 1.0f};
  // In rank order: ((1e8 + 1) - 1e8) + 1 = 0 + 1 = 1 in float (1e8 + 1 rounds to 1e8); any
  // other order, e.g. (1e8 - 1e8) + 1 + 1, gives 2.
  for (int64_t count : {1, 7, 1000}) {
    std::vector<std::vector<float>> got(4);
    OnEveryRank(g, [&](Collective& c) {
      std::vector<float> x(count, parts[c.rank()]);
      x[0] = static_cast<float>(c.rank());  // element 0: 0 + 1 + 2 + 3
      ASSERT_TRUE(c.AllReduceSum(x.data(), count).ok());
      got[c.rank()] = x;
    });
    for (const auto& x : got) {
      EXPECT_EQ(x[0], 6.0f);
      for (int64_t i = 1; i < count; ++i) ASSERT_EQ(x[i], 1.0f) << "count " << count;
    }
  }
}

TEST(InProcessGroup, ManyRoundsOfDifferentSizesStayInStep) {
  InProcessGroup g(3);
  std::vector<int> failures(3, 0);
  OnEveryRank(g, [&](Collective& c) {
    for (int round = 0; round < 500; ++round) {
      const size_t n = 1 + round % 13;
      std::vector<float> x(n, static_cast<float>(round + c.rank()));
      if (!c.AllReduceSum(x.data(), static_cast<int64_t>(n)).ok()) ++failures[c.rank()];
      const float want = static_cast<float>(3 * round + 3);
      for (float v : x) failures[c.rank()] += v != want;
      int b = c.rank() == round % 3 ? round : -1;
      if (!c.Broadcast(&b, sizeof(b), round % 3).ok() || b != round) ++failures[c.rank()];
    }
  });
  EXPECT_THAT(failures, ::testing::ElementsAre(0, 0, 0));
}

TEST(InProcessGroup, StringsOfDifferentLengths) {
  InProcessGroup g(3);
  std::vector<std::vector<std::string>> got(3);
  std::vector<std::string> bcast(3);
  OnEveryRank(g, [&](Collective& c) {
    auto all = AllGatherStrings(c, std::string(static_cast<size_t>(c.rank()) * 5, 'a' + c.rank()));
    ASSERT_TRUE(all.ok()) << all.status();
    got[c.rank()] = *all;
    std::string s = c.rank() == 1 ? "from one" : "";
    ASSERT_TRUE(BroadcastString(c, &s, 1).ok());
    bcast[c.rank()] = s;
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(got[r], ::testing::ElementsAre("", "bbbbb", "cccccccccc"));
    EXPECT_EQ(bcast[r], "from one");
  }
}

TEST(InProcessGroup, AbortWakesAWaitingRankAndFailsLaterOperations) {
  InProcessGroup g(2);
  absl::Status waited;
  std::thread t([&] {
    float x = 1;
    waited = g.rank(0).AllReduceSum(&x, 1);  // rank 1 never comes
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  g.Abort("rank 1 is gone");
  t.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(waited.message(), HasSubstr("rank 1 is gone"));
  int v = 0;
  EXPECT_FALSE(g.rank(1).Broadcast(&v, sizeof(v), 0).ok());
}

TEST(SumPartsInRankOrder, AddsPartsLeftToRight) {
  const float parts[6] = {1e8f, 2, 1, -4, -1e8f, 8};  // 3 parts of 2
  float out[2];
  SumPartsInRankOrder(parts, 3, 2, out);
  EXPECT_EQ(out[0], (1e8f + 1.0f) - 1e8f);
  EXPECT_EQ(out[1], 6.0f);
}

}  // namespace
}  // namespace cascade
