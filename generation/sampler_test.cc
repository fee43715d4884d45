#include "generation/sampler.h"

#include <map>
#include <vector>

#include "gtest/gtest.h"

namespace cascade {
namespace {

std::vector<float> Logits() { return {1.0f, 3.0f, 2.5f, -1.0f, 0.0f}; }

// Sampling from the whole distribution at `temperature`: no top-k, top-p or min-p cut.
SamplingParams WholeDistribution(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

TEST(Sampler, GreedyPicksArgmaxAndReportsLogprob) {
  auto l = Logits();
  SampleResult r = Sample(l, SamplingParams::Greedy(), {}, 0);
  EXPECT_EQ(r.token, 1);
  double sum = 0;
  for (float v : l) sum += std::exp(v);
  EXPECT_NEAR(r.logprob, 3.0 - std::log(sum), 1e-5);
}

TEST(Sampler, SkippingTheLogprobKeepsEveryToken) {
  auto l = Logits();
  const SamplingParams hot = WholeDistribution(1.5f);
  SamplingParams penalized = SamplingParams::Greedy();
  penalized.repetition_penalty = 2.0f;
  const std::vector<int32_t> history = {1, 1, 2};
  for (const SamplingParams& p : {SamplingParams::Greedy(), hot, penalized}) {
    for (uint64_t draw = 0; draw < 50; ++draw) {
      const SampleResult with = Sample(l, p, history, draw, true);
      const SampleResult without = Sample(l, p, history, draw, false);
      EXPECT_EQ(with.token, without.token) << p.DebugString() << " draw " << draw;
      EXPECT_LT(with.logprob, 0.0f);
      EXPECT_EQ(without.logprob, 0.0f);
    }
  }
  // The skipped logprob does not skip the penalties: with tokens 1 and 2 penalized, 1 keeps
  // the lead (3.0 / 2 against 2.5 / 2); with only 1 penalized, 2 wins (2.5 against 1.5).
  EXPECT_EQ(Sample(l, penalized, history, 0, false).token, 1);
  EXPECT_EQ(Sample(l, penalized, std::vector<int32_t>{1, 1}, 0, false).token, 2);
}

TEST(Sampler, SameSeedSameDrawsDifferentSeedDifferentDraws) {
  auto l = Logits();
  SamplingParams p = WholeDistribution(1.5f);
  p.seed = 42;
  std::vector<int32_t> a, b, c;
  for (uint64_t i = 0; i < 200; ++i) {
    a.push_back(Sample(l, p, {}, i).token);
    b.push_back(Sample(l, p, {}, i).token);
  }
  p.seed = 43;
  for (uint64_t i = 0; i < 200; ++i) c.push_back(Sample(l, p, {}, i).token);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // The draws follow the distribution: token 1 (highest logit) is the most frequent.
  std::map<int32_t, int> count;
  for (int32_t t : a) ++count[t];
  EXPECT_GT(count[1], count[0]);
  EXPECT_GT(count[2], count[3]);
}

TEST(Sampler, TopKOneAndTinyTopPAreGreedy) {
  auto l = Logits();
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  for (uint64_t i = 0; i < 20; ++i) EXPECT_EQ(Sample(l, p, {}, i).token, 1);
  p.top_k = 0;
  p.top_p = 0.01f;
  for (uint64_t i = 0; i < 20; ++i) EXPECT_EQ(Sample(l, p, {}, i).token, 1);
  p.top_p = 1.0f;
  p.min_p = 0.9f;  // only tokens within 90% of the best survive: token 1 alone
  for (uint64_t i = 0; i < 20; ++i) EXPECT_EQ(Sample(l, p, {}, i).token, 1);
}

TEST(Sampler, PenaltiesDemoteRecentTokens) {
  auto l = Logits();
  SamplingParams p = SamplingParams::Greedy();
  p.repetition_penalty = 2.0f;  // token 1: 3.0 -> 1.5, below token 2's 2.5
  std::vector<int32_t> history = {1};
  EXPECT_EQ(Sample(l, p, history, 0).token, 2);
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.6f;
  EXPECT_EQ(Sample(l, p, history, 0).token, 2);
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.2f;  // twice: 3.0 - 0.4 = 2.6 still wins; three times: 2.4 loses
  history = {1, 1};
  EXPECT_EQ(Sample(l, p, history, 0).token, 1);
  history = {1, 1, 1};
  EXPECT_EQ(Sample(l, p, history, 0).token, 2);
  p.penalty_last_n = 1;  // only the last token counts
  EXPECT_EQ(Sample(l, p, history, 0).token, 1);
}

TEST(Sampler, ValidateNamesTheBadField) {
  SamplingParams p;
  p.top_p = 1.5f;
  EXPECT_NE(p.Validate().message().find("top_p"), std::string::npos);
  p = SamplingParams();
  p.temperature = -1;
  EXPECT_NE(p.Validate().message().find("temperature"), std::string::npos);
  p = SamplingParams();
  p.temperature = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(p.Validate().ok());
  EXPECT_TRUE(SamplingParams().Validate().ok());
}

}  // namespace
}  // namespace cascade
