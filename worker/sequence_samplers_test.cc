#include "worker/sequence_samplers.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "generation/sampler.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

constexpr int kVocab = 32;

// Logits that make the penalties matter: a few tokens close to each other.
std::vector<float> Logits(int step) {
  std::vector<float> z(kVocab);
  for (int i = 0; i < kVocab; ++i) z[i] = std::sin(0.7f * static_cast<float>(i + 3 * step));
  return z;
}

SequenceSampling Penalised(SeqId seq) {
  SequenceSampling s;
  s.seq = seq;
  s.params.temperature = 0.9f;
  s.params.seed = 1234;
  s.params.repetition_penalty = 1.5f;
  s.params.frequency_penalty = 0.4f;
  s.params.penalty_last_n = 6;
  return s;
}

// A sequence decoded step by step through the samplers gives, token for token, what the
// sampler gives with the whole history in hand (as the scheduler used to send it).
TEST(SequenceSamplers, KeepTheWindowFromTheFramesTokens) {
  SequenceSamplers samplers;
  const SequenceSampling s = Penalised(7);
  ASSERT_TRUE(samplers.Admit({s}).ok());
  std::vector<int32_t> tokens = {1, 5, 9, 5, 2};  // the prompt
  Batch prompt;
  for (size_t i = 0; i < tokens.size(); ++i) {
    prompt.push_back({tokens[i], 7, static_cast<int32_t>(i), i + 1 == tokens.size()});
  }
  ASSERT_TRUE(samplers.Observe(prompt).ok());
  SampledToken t = samplers.Sample(prompt.back(), Logits(0));
  for (int step = 1; step < 12; ++step) {
    const SampleResult want =
        Sample(Logits(step - 1), s.params, tokens, tokens.size(), /*with_logprob=*/false);
    ASSERT_EQ(t.token, want.token) << "step " << step;
    EXPECT_EQ(t.position, static_cast<int32_t>(tokens.size()));
    tokens.push_back(t.token);
    const Batch next = {{t.token, 7, static_cast<int32_t>(tokens.size()) - 1, true}};
    ASSERT_TRUE(samplers.Observe(next).ok());
    t = samplers.Sample(next.back(), Logits(step));
  }
}

// A batch sent again (its result was lost) or a rewound sequence overwrites what it
// repeats: the window is the sequence's tokens as last sent.
TEST(SequenceSamplers, ARewindOverwritesTheTokensItRepeats) {
  SequenceSamplers samplers;
  ASSERT_TRUE(samplers.Admit({Penalised(3)}).ok());
  ASSERT_TRUE(samplers.Observe({{1, 3, 0, false}, {4, 3, 1, false}, {4, 3, 2, true}}).ok());
  ASSERT_TRUE(samplers.Observe({{8, 3, 1, false}, {9, 3, 2, true}}).ok());
  SequenceSamplers fresh;
  ASSERT_TRUE(fresh.Admit({Penalised(3)}).ok());
  ASSERT_TRUE(fresh.Observe({{1, 3, 0, false}, {8, 3, 1, false}, {9, 3, 2, true}}).ok());
  const TokenSlot last{9, 3, 2, true};
  EXPECT_EQ(samplers.Sample(last, Logits(4)).token, fresh.Sample(last, Logits(4)).token);
}

TEST(SequenceSamplers, RefuseUnknownSequencesGapsAndTooMany) {
  SequenceSamplers samplers;
  auto st = samplers.Observe({{1, 9, 0, true}});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), HasSubstr("sequence 9 was never admitted"));
  ASSERT_TRUE(samplers.Admit({Penalised(9)}).ok());
  st = samplers.Observe({{1, 9, 4, true}});  // positions 0..3 never came
  EXPECT_THAT(std::string(st.message()), HasSubstr("tokens before position 4"));
  st = samplers.Observe({{1, 9, 0, false}, {2, 9, 2, true}});
  EXPECT_THAT(std::string(st.message()), HasSubstr("position 2 follows 0"));
  samplers.Release({9});
  EXPECT_EQ(samplers.size(), 0u);
  EXPECT_FALSE(samplers.Observe({{1, 9, 0, true}}).ok());

  std::vector<SequenceSampling> many(SequenceSamplers::kMaxSequences);
  for (size_t i = 0; i < many.size(); ++i) many[i].seq = static_cast<SeqId>(i + 1);
  ASSERT_TRUE(samplers.Admit(many).ok());
  ASSERT_TRUE(samplers.Admit({many[0]}).ok());  // again: replaces, adds nothing
  st = samplers.Admit({Penalised(0)});
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace cascade
