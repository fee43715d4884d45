// The serving path in one process: the scheduler over real pipeline stages
// (tools/local_engine.h), against references computed by independent implementations
// (llama2.c's run.c greedy ids for stories260K), and against itself alone versus batched.
#include <fstream>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_models.h"
#include "model/test_util.h"
#include "local/local_engine.h"

namespace cascade {
namespace {

std::vector<int32_t> ReadIds(const std::string& path) {
  std::ifstream in(path);
  std::vector<int32_t> ids;
  int32_t v;
  while (in >> v) ids.push_back(v);
  return ids;
}

struct Output {
  std::string text;
  std::vector<int32_t> ids;
  FinishReason finish = FinishReason::kCancelled;
  absl::Status status;
};

Output Drain(RequestStream& s) {
  Output o;
  for (;;) {
    auto e = s.Next(std::chrono::seconds(120));
    if (!e) return {o.text, o.ids, o.finish, absl::DeadlineExceededError("no event in 120 s")};
    o.text += e->text;
    o.ids.insert(o.ids.end(), e->ids.begin(), e->ids.end());
    if (e->last) {
      o.finish = e->finish;
      o.status = e->status;
      return o;
    }
  }
}

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto src = ModelSource::Open(testing::BundledModel());
    ASSERT_TRUE(src.ok()) << src.status();
    src_ = std::move(*src);
    auto tok = Tokenizer::FromSource(*src_);
    ASSERT_TRUE(tok.ok());
    tok_ = std::move(*tok);
  }
  std::unique_ptr<LocalEngine> Engine(int stages, int64_t prefill_chunk = 256) {
    LocalEngineOptions o;
    o.stages = EvenLayerRanges(5, stages);
    o.stage.kv_sequences = 16;
    o.scheduler.prefill_chunk = prefill_chunk;
    auto e = LocalEngine::Create(*src_, *tok_, o);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }
  SequenceRequest Request(const std::string& prompt, int max_tokens, float temperature,
                          uint64_t seed) {
    SequenceRequest r;
    r.prompt = *tok_->Encode(prompt, true, false);
    r.max_tokens = max_tokens;
    r.sampling = temperature > 0 ? SamplingParams() : SamplingParams::Greedy();
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    return r;
  }
  std::unique_ptr<ModelSource> src_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(PipelineTest, ThreeStagesGiveRunCsGreedyIds) {
  const std::string ref_path = testing::SharedPath("models/stories260K/prompt-greedy.ids");
  CASCADE_REQUIRE_SHARED(ref_path);
  const std::vector<int32_t> ref = ReadIds(ref_path);  // prompt (5 ids) + 200 greedy ids
  ASSERT_EQ(ref.size(), 205u);
  auto engine = Engine(3);
  SequenceRequest r = Request("Once upon a time", 200, 0, 0);
  ASSERT_EQ(r.prompt, std::vector<int32_t>(ref.begin(), ref.begin() + 5));
  r.ignore_eos = true;
  auto s = engine->scheduler().Submit(r);
  ASSERT_TRUE(s.ok());
  Output o = Drain(**s);
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, std::vector<int32_t>(ref.begin() + 5, ref.end()));
  EXPECT_EQ(o.finish, FinishReason::kLength);
}

TEST_F(PipelineTest, APromptLongerThanThePrefillChunkGivesTheSameTokens) {
  // 300 prompt tokens in chunks of 7 against the whole prompt in one chunk.
  SequenceRequest r = Request("Once upon a time", 20, 0, 0);
  while (r.prompt.size() < 300) r.prompt.push_back(r.prompt[1 + r.prompt.size() % 4]);
  auto whole = Engine(2, 512);
  auto chunked = Engine(2, 7);
  auto a = whole->scheduler().Submit(r);
  auto b = chunked->scheduler().Submit(r);
  ASSERT_TRUE(a.ok() && b.ok());
  Output oa = Drain(**a), ob = Drain(**b);
  ASSERT_TRUE(oa.status.ok() && ob.status.ok());
  EXPECT_EQ(oa.ids.size(), 20u);
  EXPECT_EQ(oa.ids, ob.ids);
  EXPECT_GT(chunked->scheduler().Stats().batches, 300u / 7);
}

TEST_F(PipelineTest, ConcurrentStreamsGetExactlyTheirSoloText) {
  const char* prompts[] = {"Once upon a time", "The dog",       "Lily and Tom",   "One day",
                           "The sun",          "A little bird", "Sam had a ball", "Mom said"};
  std::vector<Output> solo;
  {
    auto engine = Engine(3);
    for (int i = 0; i < 16; ++i) {
      auto s = engine->scheduler().Submit(
          Request(prompts[i % 8], 40, i % 2 ? 0.9f : 0.0f, 1000 + i));
      ASSERT_TRUE(s.ok());
      solo.push_back(Drain(**s));
    }
  }
  auto engine = Engine(3);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 16; ++i) {
    auto s =
        engine->scheduler().Submit(Request(prompts[i % 8], 40, i % 2 ? 0.9f : 0.0f, 1000 + i));
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  for (int i = 0; i < 16; ++i) {
    Output o = Drain(*streams[i]);
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.text, solo[i].text) << "stream " << i;
    EXPECT_EQ(o.ids, solo[i].ids) << "stream " << i;
  }
  EXPECT_GT(engine->scheduler().Stats().batches, 40u);
}

TEST_F(PipelineTest, CancelFreesKvOnEveryStage) {
  auto engine = Engine(3);
  SequenceRequest r = Request("Once upon a time", 400, 0, 0);
  r.ignore_eos = true;
  auto s = engine->scheduler().Submit(r);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Next(std::chrono::seconds(30)).has_value());  // generating
  (*s)->Cancel();
  Output o = Drain(**s);
  EXPECT_EQ(o.finish, FinishReason::kCancelled);
  EXPECT_LT(o.ids.size(), 400u);
  // The release travels with a release-only frame; wait for each stage to apply it.
  for (int st = 0; st < 3; ++st) {
    const KvCache& kv = engine->pipeline().executor(st).stage().kv_cache();
    for (int i = 0; i < 2000 && kv.num_sequences() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(kv.num_sequences(), 0u) << "stage " << st;
  }
  EXPECT_EQ(engine->scheduler().Stats().kv_blocks_reserved, 0);
}

}  // namespace
}  // namespace cascade
