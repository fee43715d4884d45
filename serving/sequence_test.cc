#include "serving/sequence.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_source.h"
#include "model/test_models.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

class SequenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto src = ModelSource::Open(testing::BundledModel());
    ASSERT_TRUE(src.ok()) << src.status();
    auto tok = Tokenizer::FromGguf(*(*src)->gguf());
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
    prompt_ = *tok_->Encode("Once upon a time", true, false);
    // What follows the prompt in "Once upon a time, there was a little girl named Lily".
    const std::vector<int32_t> full =
        *tok_->Encode("Once upon a time, there was a little girl named Lily", true, false);
    ASSERT_EQ(std::vector<int32_t>(full.begin(), full.begin() + prompt_.size()), prompt_);
    continuation_.assign(full.begin() + prompt_.size(), full.end());
    ASSERT_GT(continuation_.size(), 5u);
  }
  SequenceRequest Request(int32_t max_tokens) {
    SequenceRequest r;
    r.prompt = prompt_;
    r.max_tokens = max_tokens;
    return r;
  }
  std::unique_ptr<Tokenizer> tok_;
  std::vector<int32_t> prompt_, continuation_;
};

TEST_F(SequenceTest, MaxTokensEndsWithLengthAndEveryTokenIsShown) {
  Sequence s(*tok_, Request(3), 3, 512);
  std::string text;
  for (int i = 0; i < 3; ++i) {
    Sequence::Step step = s.Accept(continuation_[i]);
    EXPECT_TRUE(step.appended);
    text += step.text;
    EXPECT_EQ(step.finished, i == 2);
    if (step.finished) {
      EXPECT_EQ(step.reason, FinishReason::kLength);
    }
  }
  text += s.Flush();
  EXPECT_EQ(text, ", there was");
  EXPECT_EQ(s.generated(), 3);
  EXPECT_EQ(s.tokens().size(), prompt_.size() + 3);
}

TEST_F(SequenceTest, EosEndsWithoutBeingShownUnlessIgnored) {
  const int32_t eos = 2;  // the bundled model's EOS
  ASSERT_TRUE(tok_->IsEndOfGeneration(eos));
  Sequence s(*tok_, Request(10), 10, 512);
  s.Accept(continuation_[0]);
  Sequence::Step step = s.Accept(eos);
  EXPECT_TRUE(step.finished);
  EXPECT_FALSE(step.appended);
  EXPECT_EQ(step.reason, FinishReason::kEndOfSequence);
  EXPECT_EQ(s.generated(), 1);

  SequenceRequest r = Request(10);
  r.ignore_eos = true;
  Sequence t(*tok_, r, 10, 512);
  Sequence::Step kept = t.Accept(eos);
  EXPECT_FALSE(kept.finished);
  EXPECT_TRUE(kept.appended);
  EXPECT_EQ(t.generated(), 1);
}

TEST_F(SequenceTest, StopStringEndsAndHidesItselfAndWhatFollows) {
  SequenceRequest r = Request(100);
  r.stop = {"Lily"};
  Sequence s(*tok_, r, 100, 512);
  std::string text;
  Sequence::Step step;
  for (int32_t id : continuation_) {
    step = s.Accept(id);
    text += step.text;
    if (step.finished) break;
  }
  EXPECT_TRUE(step.finished);
  EXPECT_EQ(step.reason, FinishReason::kStop);
  EXPECT_EQ(text, ", there was a little girl named ");
  EXPECT_EQ(s.Flush(), "");
}

TEST_F(SequenceTest, AFullContextEndsWithContextFull) {
  const int64_t context = static_cast<int64_t>(prompt_.size()) + 2;
  Sequence s(*tok_, Request(50), 50, context);
  EXPECT_FALSE(s.Accept(continuation_[0]).finished);
  Sequence::Step step = s.Accept(continuation_[1]);
  EXPECT_TRUE(step.finished);
  EXPECT_EQ(step.reason, FinishReason::kContextFull);
}

// The one max_tokens rule (every front end's): what was asked, or what the context leaves
// when nothing was; more than fits after the prompt is refused, naming all three numbers.
TEST(ResolveMaxTokens, AskedWhatFitsOrRefused) {
  EXPECT_EQ(*ResolveMaxTokens(0, 10, 512), 502);
  EXPECT_EQ(*ResolveMaxTokens(16, 10, 512), 16);
  EXPECT_EQ(*ResolveMaxTokens(502, 10, 512), 502);
  EXPECT_EQ(*ResolveMaxTokens(1, 100, 101), 1);
  absl::StatusOr<int32_t> over = ResolveMaxTokens(5000, 12, 2048);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(over.status().message(),
            "max_tokens 5000 plus the prompt's 12 tokens exceeds the model's context of 2048 "
            "tokens");
  EXPECT_FALSE(ResolveMaxTokens(503, 10, 512).ok());
  EXPECT_THAT(std::string(ResolveMaxTokens(40, 10, 32, kKvCacheRoom).status().message()),
              HasSubstr("exceeds the KV cache of 32 tokens"));
  EXPECT_EQ(ResolveMaxTokens(0, 512, 512).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SequenceTest, ValidationNamesEachProblem) {
  auto check = [&](SequenceRequest r, const std::string& what) {
    absl::Status st = ValidateSequenceRequest(r, 512, 512);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(std::string(st.message()), HasSubstr(what));
  };
  EXPECT_TRUE(ValidateSequenceRequest(Request(5), 512, 512).ok());
  check(SequenceRequest{}, "empty");
  SequenceRequest bad_id = Request(5);
  bad_id.prompt.push_back(512);
  check(bad_id, "outside the vocabulary");
  SequenceRequest long_prompt = Request(5);
  long_prompt.prompt.assign(512, 5);
  check(long_prompt, "does not fit the context of 512");
  check(Request(-1), "max_tokens");
  check(Request(kMaxTokensLimit + 1), "max_tokens");
  check(Request(512), "exceeds the model's context of 512 tokens");
  SequenceRequest hot = Request(5);
  hot.sampling.temperature = -1;
  check(hot, "temperature");
  SequenceRequest many = Request(5);
  many.stop.assign(kMaxStopStrings + 1, "x");
  check(many, "stop strings");
  SequenceRequest huge = Request(5);
  huge.stop = {std::string(kMaxStopBytes + 1, 'x')};
  check(huge, "stop string of");
}

}  // namespace
}  // namespace cascade
