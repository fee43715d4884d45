#include "engine/draft_model.h"

#include <fstream>
#include <iterator>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/test_models.h"
#include "model/test_util.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

std::vector<int32_t> ReadIds(const std::string& path) {
  std::ifstream in(path);
  return {std::istream_iterator<int32_t>(in), std::istream_iterator<int32_t>()};
}

class DraftModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CASCADE_REQUIRE_SHARED(testing::SharedPath("models/stories260K/prompt-greedy.ids"));
    auto src = ModelSource::Open(testing::BundledModel());
    ASSERT_TRUE(src.ok()) << src.status();
    auto tok = Tokenizer::FromSource(**src);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
    // "Once upon a time" (5 ids with BOS), then run.c's greedy continuation.
    greedy_ = ReadIds(testing::SharedPath("models/stories260K/prompt-greedy.ids"));
    ASSERT_GE(greedy_.size(), 40u);
  }
  std::span<const int32_t> Greedy(size_t n) const { return std::span(greedy_).first(n); }
  std::vector<int32_t> GreedyAfter(size_t n, size_t k) const {
    return {greedy_.begin() + static_cast<std::ptrdiff_t>(n),
            greedy_.begin() + static_cast<std::ptrdiff_t>(n + k)};
  }

  std::unique_ptr<Tokenizer> tok_;
  std::vector<int32_t> greedy_;
};

// The drafts are the model's greedy continuation, from a fresh cache and from one that
// holds an earlier, longer guess (rewound), and the same for a sequence it dropped.
TEST_F(DraftModelTest, DraftsAreTheGreedyContinuationAcrossRewindsAndDrops) {
  auto model = DraftModel::Open(testing::BundledModel(), *tok_, {.threads = 1, .sequences = 2});
  ASSERT_TRUE(model.ok()) << model.status();
  auto drafter = (*model)->NewDrafter();
  ASSERT_TRUE(drafter.ok()) << drafter.status();
  Drafter& d = **drafter;
  EXPECT_EQ(d.Draft(1, Greedy(5), 8), GreedyAfter(5, 8));
  // Three of the eight accepted and one more sampled: it catches up from its cache.
  EXPECT_EQ(d.Draft(1, Greedy(9), 4), GreedyAfter(9, 4));
  // Every draft accepted: the cache holds all but the last.
  EXPECT_EQ(d.Draft(1, Greedy(14), 6), GreedyAfter(14, 6));
  // A token the draft did not guess (the target sampled another): drafts from there equal
  // those of a drafter that never saw the guesses.
  std::vector<int32_t> turned(greedy_.begin(), greedy_.begin() + 16);
  turned.push_back(turned.back() == 300 ? 301 : 300);
  auto fresh = (*model)->NewDrafter();
  ASSERT_TRUE(fresh.ok());
  const std::vector<int32_t> expected = (*fresh)->Draft(7, turned, 5);
  EXPECT_EQ(expected.size(), 5u);
  EXPECT_EQ(d.Draft(1, turned, 5), expected);
  // Two more sequences in a cache for two: the least recently used (1) is dropped and
  // rebuilt when it comes back.
  EXPECT_EQ(d.Draft(2, Greedy(6), 3), GreedyAfter(6, 3));
  EXPECT_EQ(d.Draft(3, Greedy(7), 3), GreedyAfter(7, 3));
  EXPECT_EQ(d.Draft(1, Greedy(20), 4), GreedyAfter(20, 4));
  d.Forget(2);
  EXPECT_EQ(d.Draft(2, Greedy(30), 2), GreedyAfter(30, 2));
  // Nothing to draft: k 0, no tokens, or no room left in the context.
  EXPECT_TRUE(d.Draft(4, Greedy(5), 0).empty());
  EXPECT_TRUE(d.Draft(4, {}, 3).empty());
  std::vector<int32_t> full((*model)->config().context_length, greedy_[5]);
  EXPECT_TRUE(d.Draft(4, full, 3).empty());
}

// A catch-up longer than a batch (here 4 positions) goes in one batch a call, drafting
// nothing until it is done; then the drafts are the greedy continuation.
TEST_F(DraftModelTest, ALongCatchUpIsFedOneBatchACall) {
  auto model = DraftModel::Open(testing::BundledModel(), *tok_,
                                {.threads = 1, .sequences = 1, .max_batch_tokens = 4});
  ASSERT_TRUE(model.ok()) << model.status();
  auto drafter = (*model)->NewDrafter();
  ASSERT_TRUE(drafter.ok());
  int calls = 0;
  std::vector<int32_t> drafts;
  while (drafts.empty() && calls < 10) {
    drafts = (*drafter)->Draft(1, Greedy(14), 3);
    ++calls;
  }
  EXPECT_EQ(calls, 4);  // 13 positions in batches of 4, then the last with its logits
  EXPECT_EQ(drafts, GreedyAfter(14, 3));
}

// A model of another architecture with the same vocabulary may draft; one of another
// vocabulary is refused, naming the difference.
TEST_F(DraftModelTest, TheVocabularyMustBeTheModels) {
  const std::string qwen3 = testing::SharedPath("models/arch/mini-qwen3-f32.gguf");
  CASCADE_REQUIRE_SHARED(qwen3);
  auto same_vocab = DraftModel::Open(qwen3, *tok_, {});
  ASSERT_TRUE(same_vocab.ok()) << same_vocab.status();
  auto drafter = (*same_vocab)->NewDrafter();
  ASSERT_TRUE(drafter.ok());
  const std::vector<int32_t> drafts = (*drafter)->Draft(1, Greedy(5), 4);
  ASSERT_EQ(drafts.size(), 4u);
  for (int32_t id : drafts) EXPECT_TRUE(tok_->IsValid(id)) << id;

  auto other = DraftModel::Open(testing::SharedPath("models/tiny-llama/tiny-llama-f16.gguf"),
                                *tok_, {});
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other.status().message(), HasSubstr("32000 tokens and the model's 512"));

  auto missing = DraftModel::Open("/nonexistent/draft.gguf", *tok_, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("draft model /nonexistent/draft.gguf"));
  EXPECT_FALSE(DraftModel::Open(testing::BundledModel(), *tok_, {.threads = 0}).ok());
}

// Tiny gpt-2 style vocabularies, equal but for `last`: a difference in one token's text is
// refused, naming the token.
std::unique_ptr<Tokenizer> Vocab(const std::string& last) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetStringArray("tokenizer.ggml.tokens", {"a", "b", "ab", last});
  w.SetInt32Array("tokenizer.ggml.token_type", {1, 1, 1, 1});
  w.SetStringArray("tokenizer.ggml.merges", {"a b"});
  auto bytes = w.Serialize();
  EXPECT_TRUE(bytes.ok());
  auto file = GgufFile::Parse(*bytes, "vocab.gguf");
  EXPECT_TRUE(file.ok()) << file.status();
  auto tok = Tokenizer::FromGguf(**file);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return std::move(*tok);
}

TEST(DraftVocabulary, ATokenOfOtherTextIsNamed) {
  const auto a = Vocab("ba"), b = Vocab("ba"), c = Vocab("bb");
  EXPECT_TRUE(CompareVocabularies(*a, *b).ok());
  const absl::Status st = CompareVocabularies(*a, *c);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("token 3 is 'bb' in the draft model and 'ba' in the model"));
}

}  // namespace
}  // namespace cascade
