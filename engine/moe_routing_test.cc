// RouteTokens: the experts and weights of each token from its router logits alone.
#include "engine/moe_routing.h"

#include <cmath>

#include "gtest/gtest.h"

namespace cascade {
namespace {

// Two tokens, four experts, top 2: each expert lists its tokens in batch order with the
// softmax probabilities (renormalised over the chosen two when asked).
TEST(RouteTokens, PicksTheTopKPerTokenAndGroupsTokensPerExpert) {
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, -1.0f,  // token 0: experts 1, 2
                                     3.0f, 0.0f, 0.0f, 2.5f};  // token 1: experts 0, 3
  ExpertRouting r;
  RouteTokens(logits, 2, 4, 2, /*renormalise=*/false, &r);
  ASSERT_EQ(r.rows.size(), 4u);
  EXPECT_EQ(r.rows[0], std::vector<int64_t>{1});
  EXPECT_EQ(r.rows[1], std::vector<int64_t>{0});
  EXPECT_EQ(r.rows[2], std::vector<int64_t>{0});
  EXPECT_EQ(r.rows[3], std::vector<int64_t>{1});
  const double z0 = 1 + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_NEAR(r.weights[1][0], std::exp(2.0) / z0, 1e-7);
  EXPECT_NEAR(r.weights[2][0], std::exp(1.0) / z0, 1e-7);

  RouteTokens(logits, 2, 4, 2, /*renormalise=*/true, &r);  // reuses r
  EXPECT_EQ(r.rows[1], std::vector<int64_t>{0});
  EXPECT_NEAR(r.weights[1][0] + r.weights[2][0], 1.0, 1e-7);
  EXPECT_NEAR(r.weights[1][0], std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)), 1e-7);
  EXPECT_NEAR(r.weights[0][0] + r.weights[3][0], 1.0, 1e-7);
}

// Equal probabilities go to the lower expert index, whatever else is in the batch.
TEST(RouteTokens, TiesGoToTheLowerExpertAndATokensRouteIgnoresItsBatch) {
  const std::vector<float> tie = {1.0f, 5.0f, 5.0f, 5.0f};
  ExpertRouting alone;
  RouteTokens(tie, 1, 4, 2, true, &alone);
  EXPECT_EQ(alone.rows[1], std::vector<int64_t>{0});
  EXPECT_EQ(alone.rows[2], std::vector<int64_t>{0});
  EXPECT_TRUE(alone.rows[3].empty());
  std::vector<float> batch = {9.0f, 0.0f, 0.0f, 8.0f};  // experts 0 and 3
  batch.insert(batch.end(), tie.begin(), tie.end());
  ExpertRouting both;
  RouteTokens(batch, 2, 4, 2, true, &both);
  EXPECT_EQ(both.rows[1], std::vector<int64_t>{1});
  EXPECT_EQ(both.rows[2], std::vector<int64_t>{1});
  EXPECT_EQ(both.weights[1][0], alone.weights[1][0]);  // bit for bit
  EXPECT_EQ(both.weights[2][0], alone.weights[2][0]);
}

}  // namespace
}  // namespace cascade
