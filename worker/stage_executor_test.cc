#include "worker/stage_executor.h"

#include <future>
#include <mutex>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_models.h"
#include "generation/sampler.h"
#include "worker/local_pipeline.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

// Collects results from the last stage.
class Results {
 public:
  void Add(StepResult r) {
    std::lock_guard<std::mutex> lock(mu_);
    results_.push_back(std::move(r));
    cv_.notify_all();
  }
  StepResult Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !results_.empty(); });
    StepResult r = std::move(results_.front());
    results_.erase(results_.begin());
    return r;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<StepResult> results_;
};

StageFrame TokenFrame(uint64_t batch, SeqId seq, const std::vector<int32_t>& tokens, int32_t from) {
  StageFrame f;
  f.plan_id = 1;
  f.batch_id = batch;
  for (size_t i = 0; i < tokens.size(); ++i) {
    f.slots.push_back({tokens[i], seq, from + static_cast<int32_t>(i), i + 1 == tokens.size()});
  }
  if (from == 0) {  // the sequence's first frame admits it
    SequenceSampling s;
    s.seq = seq;
    s.params = SamplingParams::Greedy();
    f.admit.push_back(s);
  }
  return f;
}

TEST(LocalPipeline, ThreeStagesDecodeLikeOneStage) {
  auto src = ModelSource::Open(testing::BundledModel());
  ASSERT_TRUE(src.ok()) << src.status();
  // Reference: greedy decoding on one stage.
  auto whole = Stage::Create(**src, {});
  ASSERT_TRUE(whole.ok());
  std::vector<int32_t> ref = {1, 403, 407, 261, 378};
  std::vector<float> logits;
  Batch b;
  for (size_t i = 0; i < ref.size(); ++i) b.push_back({ref[i], 0, (int32_t)i, i + 1 == ref.size()});
  ASSERT_TRUE((*whole)->Forward(b, {}, &logits).ok());
  for (int step = 0; step < 20; ++step) {
    const int32_t t = Sample(logits, SamplingParams::Greedy(), ref, ref.size()).token;
    ref.push_back(t);
    Batch one = {{t, 0, (int32_t)ref.size() - 1, true}};
    ASSERT_TRUE((*whole)->Forward(one, {}, &logits).ok());
  }

  Results results;
  auto p = LocalPipeline::Create(**src, EvenLayerRanges(5, 3), {}, 1,
                                 [&](StepResult r) { results.Add(std::move(r)); });
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<int32_t> got = {1, 403, 407, 261, 378};
  ASSERT_TRUE((*p)->first()->Send(TokenFrame(1, 42, got, 0)).ok());
  for (int step = 0; step < 20; ++step) {
    StepResult r = results.Wait();
    ASSERT_TRUE(r.error.empty()) << r.error;
    ASSERT_EQ(r.tokens.size(), 1u);
    EXPECT_EQ(r.tokens[0].position, static_cast<int32_t>(got.size()));
    got.push_back(r.tokens[0].token);
    ASSERT_TRUE((*p)->first()->Send(TokenFrame(2 + step, 42, {got.back()}, got.size() - 1)).ok());
  }
  results.Wait();
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + ref.size()), ref);
  EXPECT_EQ((*p)->executor(1).stage().kv_cache().Length(42), static_cast<int32_t>(got.size()));
  // A release frame frees the sequence on every stage, in order.
  StageFrame rel;
  rel.plan_id = 1;
  rel.batch_id = 99;
  rel.release = {42};
  ASSERT_TRUE((*p)->first()->Send(std::move(rel)).ok());
  (*p)->Stop();
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE((*p)->executor(i).stage().kv_cache().Has(42)) << "stage " << i;
    // Each stage accounts for its frames, and for the CPU time they took, which cannot
    // exceed their wall time (up to the two clocks' reads, far below 0.1 ms a frame).
    const ExecutorStats st = (*p)->executor(i).Stats();
    EXPECT_EQ(st.frames, 21u) << "stage " << i;
    EXPECT_EQ(st.tokens, 25u) << "stage " << i;
    EXPECT_GT(st.cpu_seconds, 0.0) << "stage " << i;
    EXPECT_LE(st.cpu_seconds, st.busy_seconds + 1e-4 * static_cast<double>(st.frames))
        << "stage " << i;
  }
}

TEST(LocalPipeline, FailedBatchIsReportedAndServingContinues) {
  auto src = ModelSource::Open(testing::BundledModel());
  ASSERT_TRUE(src.ok());
  Results results;
  auto p = LocalPipeline::Create(**src, EvenLayerRanges(5, 2), {}, 1,
                                 [&](StepResult r) { results.Add(std::move(r)); });
  ASSERT_TRUE(p.ok());
  // Sequence 5 is unknown: a token at position 3 cannot be placed.
  ASSERT_TRUE((*p)->first()->Send(TokenFrame(1, 5, {403}, 3)).ok());
  StepResult bad = results.Wait();
  EXPECT_EQ(bad.batch_id, 1u);
  EXPECT_THAT(bad.error, HasSubstr("holds only 0 tokens"));
  // The next batch works.
  ASSERT_TRUE((*p)->first()->Send(TokenFrame(2, 6, {1, 403}, 0)).ok());
  StepResult good = results.Wait();
  EXPECT_TRUE(good.error.empty()) << good.error;
  EXPECT_EQ(good.tokens.size(), 1u);
  EXPECT_EQ((*p)->executor(0).Stats().failed_batches, 1u);
}

}  // namespace
}  // namespace cascade
