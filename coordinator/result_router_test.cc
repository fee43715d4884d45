// ResultRouter with two pipelines at once, each a scheduler over a fake pipeline whose last
// stage sends its results, encoded with its results link key, through the router: each
// result reaches its own pipeline's scheduler; results naming no routed plan, or without the
// key of the plan they name, are refused and change nothing; a malformed result with the
// key fails its batch.
#include "coordinator/result_router.h"

#include <atomic>

#include "serving/fake_pipeline.h"
#include "coordinator/stream_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_source.h"
#include "model/test_models.h"
#include "transport/frame.h"

namespace cascade {
namespace {

using testing::FakePipeline;
using ::testing::HasSubstr;
using testing::ReadToEnd;
using testing::SeededRequest;
using testing::StreamOutput;
using testing::UndisturbedIds;

constexpr int64_t kVocab = 512;

// One pipeline: a scheduler, the fake stages it sends to, and the key of their results.
struct Served {
  uint64_t plan_id = 0;
  std::string key;
  std::shared_ptr<Scheduler> scheduler;
  std::unique_ptr<FakePipeline> pipeline;
  std::atomic<bool> corrupt{false};  // the next results carry a token outside the vocabulary
};

class RouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto src = ModelSource::Open(testing::BundledModel());
    ASSERT_TRUE(src.ok()) << src.status();
    auto tok = Tokenizer::FromSource(**src);
    ASSERT_TRUE(tok.ok());
    tok_ = std::move(*tok);
    Serve(a_, 11, "key of plan 11, thirty-two bytes");
    Serve(b_, 22, "key of plan 22, thirty-two bytes");
  }
  void TearDown() override {
    for (Served* s : {&a_, &b_}) s->scheduler->Stop();
    for (Served* s : {&a_, &b_}) s->pipeline.reset();
  }
  void Serve(Served& s, uint64_t plan_id, std::string key) {
    s.plan_id = plan_id;
    s.key = std::move(key);
    s.scheduler = std::make_shared<Scheduler>(SchedulerConfig{}, *tok_, /*context=*/512, kVocab);
    s.pipeline = std::make_unique<FakePipeline>([this, &s](StepResult r) {
      v1::StepResult wire;
      EncodeResult(r, s.key, &wire);
      if (s.corrupt.load() && wire.tokens_size() > 0) wire.mutable_tokens(0)->set_token(kVocab);
      EXPECT_TRUE(router_.OnResult(wire, "fake last stage").ok());
    });
    s.scheduler->Start();
    PipelineSpec p;
    p.plan_id = plan_id;
    p.num_stages = 2;
    p.kv_blocks = 64;
    p.kv_block_size = 16;
    p.first_stage = s.pipeline->MakeSender(plan_id);
    s.scheduler->Attach(std::move(p));
    ASSERT_TRUE(router_.Add(plan_id, {s.key, kVocab, s.scheduler}).ok());
  }
  // A result as a stranger (or another pipeline's last stage) might send it.
  static v1::StepResult Forged(uint64_t plan_id, const std::string& key, uint64_t batch) {
    StepResult r;
    r.plan_id = plan_id;
    r.batch_id = batch;
    r.tokens.push_back({1, 5, -0.5f, 3, {}});
    v1::StepResult wire;
    EncodeResult(r, key, &wire);
    return wire;
  }

  std::unique_ptr<Tokenizer> tok_;
  ResultRouter router_;  // outlives the fake pipelines that call it
  Served a_, b_;
};

TEST_F(RouterTest, EachResultReachesThePipelineItBelongsTo) {
  EXPECT_EQ(router_.size(), 2u);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    Served& s = i % 2 ? b_ : a_;
    auto st = s.scheduler->Submit(SeededRequest(8 + i, 40 + i));
    ASSERT_TRUE(st.ok()) << st.status();
    streams.push_back(*st);
  }
  for (int i = 0; i < 4; ++i) {
    StreamOutput o = ReadToEnd(*streams[i]);
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.ids, UndisturbedIds(40 + i, 8 + i)) << i;
  }
  EXPECT_EQ(a_.scheduler->Stats().completed, 2u);
  EXPECT_EQ(b_.scheduler->Stats().completed, 2u);
}

TEST_F(RouterTest, AResultForAPlanNotRoutedIsRefused) {
  EXPECT_EQ(router_.OnResult(Forged(33, a_.key, 1), "a stranger").code(),
            absl::StatusCode::kPermissionDenied);
  // A pipeline removed is refused the same way, even with its own key; the other still
  // serves.
  router_.Remove(a_.plan_id);
  router_.Remove(a_.plan_id);  // again: nothing
  EXPECT_EQ(router_.size(), 1u);
  EXPECT_EQ(router_.OnResult(Forged(a_.plan_id, a_.key, 1), "an old last stage").code(),
            absl::StatusCode::kPermissionDenied);
  auto s = b_.scheduler->Submit(SeededRequest(5, 7));
  ASSERT_TRUE(s.ok());
  StreamOutput o = ReadToEnd(**s);
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, UndisturbedIds(7, 5));
}

TEST_F(RouterTest, AResultWithoutItsPlansKeyChangesNothing) {
  b_.pipeline->Pause();
  auto s = b_.scheduler->Submit(SeededRequest(4, 8));
  ASSERT_TRUE(s.ok());
  // The other pipeline's key, a guess, none: whatever batch they claim.
  for (uint64_t batch = 1; batch < 4; ++batch) {
    for (const std::string& key : {a_.key, std::string("a guess"), std::string()}) {
      EXPECT_EQ(router_.OnResult(Forged(b_.plan_id, key, batch), "a stranger").code(),
                absl::StatusCode::kPermissionDenied);
    }
  }
  b_.pipeline->Resume();
  StreamOutput o = ReadToEnd(**s);
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, UndisturbedIds(8, 4));
}

TEST_F(RouterTest, AMalformedResultWithTheKeyFailsItsBatch) {
  a_.corrupt = true;
  auto s = a_.scheduler->Submit(SeededRequest(4, 9));
  ASSERT_TRUE(s.ok());
  StreamOutput o = ReadToEnd(**s);
  EXPECT_EQ(o.status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(o.status.message()), HasSubstr("outside the vocabulary"));
}

TEST_F(RouterTest, APlanIsRoutedOnceAndOnlyWithAKeyAndAScheduler) {
  EXPECT_EQ(router_.Add(a_.plan_id, {"another key", kVocab, b_.scheduler}).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(router_.Add(44, {"", kVocab, b_.scheduler}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(router_.Add(44, {"a key", kVocab, nullptr}).code(), absl::StatusCode::kInvalidArgument);
  // Two pipelines may share a scheduler.
  EXPECT_TRUE(router_.Add(44, {"a key", kVocab, a_.scheduler}).ok());
  EXPECT_EQ(router_.size(), 3u);
}

}  // namespace
}  // namespace cascade
