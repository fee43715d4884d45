#include "engine/stage.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "generation/sampler.h"
#include "engine/stage_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_util.h"
#include "util/npy.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

using testing::AllLogits;
using testing::GreedyDecode;
using testing::MaxAbsDiff;
using testing::ReadIds;

class Stories260K : public ::testing::TestWithParam<std::string> {};

TEST_P(Stories260K, LogitsAndGreedyIdsMatchReference) {
  const std::string model = testing::SharedPath("models/stories260K/" + GetParam());
  const std::string ref_ids = testing::SharedPath("models/stories260K/greedy.ids");
  const std::string ref_logits = testing::SharedPath("models/stories260K/logits.npy");
  CASCADE_REQUIRE_SHARED(model);
  auto src = ModelSource::Open(model);
  ASSERT_TRUE(src.ok()) << src.status();
  StageOptions opt;
  opt.threads = 2;
  auto stage = Stage::Create(**src, opt);
  ASSERT_TRUE(stage.ok()) << stage.status();
  const auto ids = ReadIds(ref_ids);
  ASSERT_EQ(ids.size(), 257u);
  auto want = ReadNpyF32(ref_logits);
  ASSERT_TRUE(want.ok()) << want.status();
  auto got = AllLogits(**stage, ids);
  const double diff = MaxAbsDiff(got, want->data);
  EXPECT_LT(diff, 1e-4) << "max |logit - reference|";
  RecordProperty("max_abs_logit_diff", std::to_string(diff));
  EXPECT_EQ(GreedyDecode(**stage, {ids[0]}, ids.size()), ids);
}

INSTANTIATE_TEST_SUITE_P(GgufAndHf, Stories260K, ::testing::Values("stories260K.gguf", "hf"));

TEST(TinyLlamaF16, LogitsWithin1e3AndSameGreedyIds) {
  const std::string model = testing::SharedPath("models/tiny-llama/tiny-llama-f16.gguf");
  CASCADE_REQUIRE_SHARED(model);
  auto src = ModelSource::Open(model);
  ASSERT_TRUE(src.ok()) << src.status();
  auto stage = Stage::Create(**src, {});
  ASSERT_TRUE(stage.ok()) << stage.status();
  const auto prompt = ReadIds(testing::SharedPath("models/tiny-llama/prompt.ids"));
  auto want = ReadNpyF32(testing::SharedPath("models/tiny-llama/f16.logits.npy"));
  ASSERT_TRUE(want.ok());
  const double diff = MaxAbsDiff(AllLogits(**stage, prompt), want->data);
  EXPECT_LT(diff, 1e-3);
  RecordProperty("max_abs_logit_diff", std::to_string(diff));
  const auto greedy = ReadIds(testing::SharedPath("models/tiny-llama/f16.greedy32.ids"));
  EXPECT_EQ(GreedyDecode(**stage, prompt, greedy.size()), greedy);
}

TEST(StageSplit, TwoStagesGiveTheWholeModelsLogits) {
  const std::string model = testing::SharedPath("models/stories260K/stories260K.gguf");
  CASCADE_REQUIRE_SHARED(model);
  auto src = ModelSource::Open(model);
  ASSERT_TRUE(src.ok());
  const auto ids = ReadIds(testing::SharedPath("models/stories260K/greedy.ids"));
  auto whole = Stage::Create(**src, {});
  ASSERT_TRUE(whole.ok());
  const auto want = AllLogits(**whole, ids);
  for (int k = 1; k < 5; ++k) {
    StageOptions a, b;
    a.layers = {0, k};
    b.layers = {k, 5};
    auto s0 = Stage::Create(**src, a);
    auto s1 = Stage::Create(**src, b);
    ASSERT_TRUE(s0.ok() && s1.ok());
    EXPECT_TRUE((*s0)->is_first() && !(*s0)->is_last());
    EXPECT_TRUE(!(*s1)->is_first() && (*s1)->is_last());
    Batch batch;
    for (size_t i = 0; i < ids.size(); ++i)
      batch.push_back({ids[i], 3, static_cast<int32_t>(i), true});
    std::vector<float> hidden, logits;
    ASSERT_TRUE((*s0)->Forward(batch, {}, &hidden).ok());
    ASSERT_EQ(hidden.size(), ids.size() * 64);
    ASSERT_TRUE((*s1)->Forward(batch, hidden, &logits).ok());
    ASSERT_EQ(logits.size(), want.size());
    EXPECT_EQ(std::memcmp(logits.data(), want.data(), want.size() * sizeof(float)), 0)
        << "split at layer " << k;
  }
}

TEST(StageBatching, SequencesDoNotAffectEachOther) {
  const std::string model = testing::SharedPath("models/tiny-llama/tiny-llama-f16.gguf");
  CASCADE_REQUIRE_SHARED(model);
  auto src = ModelSource::Open(model);
  ASSERT_TRUE(src.ok());
  StageOptions opt;
  opt.kv_sequences = 4;
  opt.threads = 2;
  auto stage = Stage::Create(**src, opt);
  ASSERT_TRUE(stage.ok());
  const std::vector<int32_t> a = {1, 450, 4996, 17354, 1701};
  const std::vector<int32_t> b = {1, 9038, 2501, 263};
  const auto alone_a = AllLogits(**stage, a, 10);
  const auto alone_b = AllLogits(**stage, b, 11);
  // Interleave the two prompts in one batch, with b's prefill split in two chunks.
  Batch batch;
  for (size_t i = 0; i < 2; ++i) batch.push_back({b[i], 11, static_cast<int32_t>(i), true});
  for (size_t i = 0; i < a.size(); ++i) batch.push_back({a[i], 10, static_cast<int32_t>(i), true});
  std::vector<float> mixed;
  ASSERT_TRUE((*stage)->Forward(batch, {}, &mixed).ok());
  Batch rest;
  for (size_t i = 2; i < b.size(); ++i) rest.push_back({b[i], 11, static_cast<int32_t>(i), true});
  std::vector<float> tail;
  ASSERT_TRUE((*stage)->Forward(rest, {}, &tail).ok());
  const size_t V = 32000;
  EXPECT_EQ(std::memcmp(mixed.data() + 2 * V, alone_a.data(), a.size() * V * 4), 0);
  EXPECT_EQ(std::memcmp(mixed.data(), alone_b.data(), 2 * V * 4), 0);
  EXPECT_EQ(std::memcmp(tail.data(), alone_b.data() + 2 * V, (b.size() - 2) * V * 4), 0);
}

// An F16 KV cache: the reference logits within 2e-3 (the F32 cache's bound, 1e-3, plus the
// keys' and values' rounding), the same greedy ids, half the cache's bytes; and sequences
// still do not affect each other (each row is rounded alone).
TEST(StageKvF16, TinyLlamaNearReferenceAndBatchInvariant) {
  const std::string model = testing::SharedPath("models/tiny-llama/tiny-llama-f16.gguf");
  CASCADE_REQUIRE_SHARED(model);
  auto src = ModelSource::Open(model);
  ASSERT_TRUE(src.ok()) << src.status();
  StageOptions f32_opt, f16_opt;
  f32_opt.kv_sequences = f16_opt.kv_sequences = 2;
  f16_opt.kv_type = TensorType::kF16;
  f16_opt.threads = 2;
  auto f32 = Stage::Create(**src, f32_opt);
  auto stage = Stage::Create(**src, f16_opt);
  ASSERT_TRUE(f32.ok() && stage.ok());
  EXPECT_EQ(KvCache::BytesFor((*stage)->kv_cache().options()) * 2,
            KvCache::BytesFor((*f32)->kv_cache().options()));
  const auto prompt = ReadIds(testing::SharedPath("models/tiny-llama/prompt.ids"));
  auto want = ReadNpyF32(testing::SharedPath("models/tiny-llama/f16.logits.npy"));
  ASSERT_TRUE(want.ok());
  const auto got = AllLogits(**stage, prompt);
  const double diff = MaxAbsDiff(got, want->data);
  EXPECT_LT(diff, 2e-3);
  EXPECT_GT(MaxAbsDiff(got, AllLogits(**f32, prompt)), 0) << "the F16 cache was not used";
  RecordProperty("max_abs_logit_diff", std::to_string(diff));
  const auto greedy = ReadIds(testing::SharedPath("models/tiny-llama/f16.greedy32.ids"));
  EXPECT_EQ(GreedyDecode(**stage, prompt, greedy.size()), greedy);

  const std::vector<int32_t> a = {1, 450, 4996, 17354, 1701};
  const std::vector<int32_t> b = {1, 9038, 2501, 263};
  const auto alone_a = AllLogits(**stage, a, 10);
  const auto alone_b = AllLogits(**stage, b, 11);
  Batch batch;
  for (size_t i = 0; i < b.size(); ++i) batch.push_back({b[i], 11, static_cast<int32_t>(i), true});
  for (size_t i = 0; i < a.size(); ++i) batch.push_back({a[i], 10, static_cast<int32_t>(i), true});
  std::vector<float> mixed;
  ASSERT_TRUE((*stage)->Forward(batch, {}, &mixed).ok());
  const size_t V = 32000;
  EXPECT_EQ(std::memcmp(mixed.data(), alone_b.data(), b.size() * V * 4), 0);
  EXPECT_EQ(std::memcmp(mixed.data() + b.size() * V, alone_a.data(), a.size() * V * 4), 0);
}

TEST(StageValidation, BadBatchesAreRefusedAndChangeNothing) {
  const std::string model = testing::SharedPath("models/stories260K/stories260K.gguf");
  CASCADE_REQUIRE_SHARED(model);
  auto src = ModelSource::Open(model);
  ASSERT_TRUE(src.ok());
  auto stage = Stage::Create(**src, {});
  ASSERT_TRUE(stage.ok());
  Stage& s = **stage;
  std::vector<float> out;
  EXPECT_THAT(s.Forward({}, {}, &out).message(), HasSubstr("empty"));
  Batch bad_token = {{512, 0, 0, true}};
  EXPECT_THAT(s.Forward(bad_token, {}, &out).message(), HasSubstr("outside the vocabulary"));
  Batch gap = {{1, 0, 0, false}, {1, 0, 2, true}};
  EXPECT_THAT(s.Forward(gap, {}, &out).message(), HasSubstr("consecutive"));
  Batch far = {{1, 0, 600, true}};
  EXPECT_THAT(s.Forward(far, {}, &out).message(), HasSubstr("context"));
  EXPECT_EQ(s.kv_cache().num_sequences(), 0u);
  StageOptions mid;
  mid.layers = {1, 5};
  auto s1 = Stage::Create(**src, mid);
  ASSERT_TRUE(s1.ok());
  std::vector<float> short_hidden(10);
  Batch one = {{1, 0, 0, true}};
  EXPECT_THAT((*s1)->Forward(one, short_hidden, &out).message(), HasSubstr("activations hold 10"));
  // and a good batch still works afterwards
  EXPECT_TRUE(s.Forward(one, {}, &out).ok());
  EXPECT_EQ(out.size(), 512u);
}

}  // namespace
}  // namespace cascade
