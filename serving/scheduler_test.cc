// The scheduler against a fake pipeline (serving/fake_pipeline.h): batching, finish
// rules, admission, cancellation, lost batches, and moving sequences to a new pipeline.
// The same scheduler over real stages is tested in tests/pipeline_test.cc.
#include "serving/scheduler.h"

#include <map>
#include <set>
#include <utility>

#include "serving/fake_pipeline.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_source.h"
#include "model/test_models.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;
using testing::FakePipeline;

struct Output {
  std::string text;
  std::vector<int32_t> ids;
  FinishReason finish = FinishReason::kCancelled;
  absl::Status status;
  StreamUsage usage;
};

Output Drain(RequestStream& s) {
  Output o;
  for (;;) {
    auto e = s.Next(std::chrono::seconds(30));
    if (!e) {
      o.status = absl::DeadlineExceededError("no event in 30 s");
      return o;
    }
    o.text += e->text;
    o.ids.insert(o.ids.end(), e->ids.begin(), e->ids.end());
    if (e->last) {
      o.finish = e->finish;
      o.status = e->status;
      o.usage = e->usage;
      return o;
    }
  }
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override { Make({}); }
  void TearDown() override { Reset(); }
  // The scheduler stops first (it sends to the pipeline), then the pipeline (it answers
  // into the scheduler).
  void Reset() {
    if (scheduler_) scheduler_->Stop();
    pipeline_.reset();
    scheduler_.reset();
  }
  void Make(SchedulerConfig config, SchedulerTimeouts timeouts = {}, int64_t kv_blocks = 256,
            std::unique_ptr<Drafter> drafter = nullptr) {
    Reset();
    if (!tok_) {
      auto src = ModelSource::Open(testing::BundledModel());
      ASSERT_TRUE(src.ok()) << src.status();
      auto tok = Tokenizer::FromSource(**src);
      ASSERT_TRUE(tok.ok());
      tok_ = std::move(*tok);
    }
    scheduler_ = std::make_unique<Scheduler>(config, *tok_, /*context=*/512, /*vocab=*/512,
                                             timeouts);
    pipeline_ = std::make_unique<FakePipeline>([this](StepResult r) { scheduler_->OnResult(r); });
    if (drafter) scheduler_->SetDrafter(std::move(drafter));
    scheduler_->Start();
    Attach(1, 3, kv_blocks);
  }
  void Attach(uint64_t plan, int stages, int64_t kv_blocks) {
    PipelineSpec p;
    p.plan_id = plan;
    p.num_stages = stages;
    p.kv_blocks = kv_blocks;
    p.kv_block_size = 16;
    p.max_batch_tokens = 64;
    p.first_stage = pipeline_->MakeSender(plan);
    scheduler_->Attach(std::move(p));
  }
  SequenceRequest Request(int max_tokens, uint64_t seed, int prompt_len = 5) {
    SequenceRequest r;
    for (int i = 0; i < prompt_len; ++i) r.prompt.push_back(300 + i % 100);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0.8f;
    r.sampling.seed = seed;
    return r;
  }
  // What an undisturbed run gives: the fake's tokens from the end of the prompt on.
  static std::vector<int32_t> Expected(const SequenceRequest& r, int n) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back(FakePipeline::TokenFor(r.sampling.seed, r.prompt.size() + i));
    return ids;
  }
  Output Run(SequenceRequest r) {
    auto s = scheduler_->Submit(std::move(r));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? Drain(**s) : Output{};
  }

  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<FakePipeline> pipeline_;
};

TEST_F(SchedulerTest, ManyStreamsEachGetTheirTokensInTheirOrder) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<SequenceRequest> reqs;
  for (int i = 0; i < 20; ++i) {
    reqs.push_back(Request(10 + i, 100 + i, 3 + i));
    auto s = scheduler_->Submit(reqs.back());
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  for (int i = 0; i < 20; ++i) {
    Output o = Drain(*streams[i]);
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.ids, Expected(reqs[i], 10 + i)) << i;
    EXPECT_EQ(o.finish, FinishReason::kLength);
    EXPECT_EQ(o.usage.completion_tokens, 10 + i);
    EXPECT_EQ(o.usage.prompt_tokens, 3 + i);
  }
  // Every batch respected the micro-batch size, and at most 3 were in flight.
  for (const StageFrame& f : pipeline_->frames()) EXPECT_LE(f.slots.size(), 64u);
  const SchedulerStats st = scheduler_->Stats();
  EXPECT_EQ(st.completed, 20u);
  EXPECT_EQ(st.kv_blocks_reserved, 0);
}

// A drafter's id the model cannot take (outside its vocabulary) never reaches the stages:
// the draft ends before it, and the text is the plain one.
TEST_F(SchedulerTest, DraftedIdsOutsideTheVocabularyAreNotSent) {
  struct Wild final : Drafter {
    std::vector<int32_t> Draft(SeqId, std::span<const int32_t>, int k) override {
      return std::vector<int32_t>(static_cast<size_t>(k), 100000);
    }
    void Forget(SeqId) override {}
  };
  SchedulerConfig c;
  c.speculative = Speculative::kDraft;
  Make(c, {}, 256, std::make_unique<Wild>());
  const SequenceRequest r = Request(12, 77);
  const Output o = Run(r);
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, Expected(r, 12));
  const std::vector<StageFrame> frames = pipeline_->frames();
  ASSERT_FALSE(frames.empty());
  for (const StageFrame& f : frames) {
    for (const auto& slot : f.slots) EXPECT_LT(slot.token, 512) << "batch " << f.batch_id;
  }
  EXPECT_EQ(scheduler_->Stats().spec_draft_tokens, 0u);
}

TEST_F(SchedulerTest, APromptLongerThanTheChunkIsPrefilledInChunks) {
  SchedulerConfig c;
  c.prefill_chunk = 16;
  c.speculative = Speculative::kOff;  // decode steps one position each, never rewound
  Make(c);
  SequenceRequest r = Request(4, 7, /*prompt_len=*/100);
  Output o = Run(r);
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, Expected(r, 4));
  // 100 prompt tokens in chunks of 16 (positions consecutive across frames), then decode.
  std::vector<StageFrame> frames = pipeline_->frames();
  int32_t next = 0;
  int prefill_frames = 0;
  for (const StageFrame& f : frames) {
    if (f.slots.empty()) continue;
    EXPECT_LE(f.slots.size(), 16u);
    EXPECT_EQ(f.slots.front().pos, next);
    next = f.slots.back().pos + 1;
    if (next <= 100) ++prefill_frames;
  }
  EXPECT_EQ(prefill_frames, 7);  // ceil(100 / 16)
}

TEST_F(SchedulerTest, StopStringsEosAndLimits) {
  SequenceRequest eos = Request(50, 2000);  // the fake draws EOS at draw index 20
  Output o = Run(eos);
  EXPECT_EQ(o.finish, FinishReason::kEndOfSequence);
  EXPECT_EQ(o.ids.size(), 15u);  // draws 5..19; EOS is not shown
  // A stop string made of the first generated token's text.
  SequenceRequest first = Request(1, 17);  // a text token (259), not a byte token
  const std::string piece = Run(first).text;
  ASSERT_FALSE(piece.empty());
  SequenceRequest stop = Request(50, 17);
  stop.stop = {piece};
  Output s = Run(stop);
  EXPECT_EQ(s.finish, FinishReason::kStop);
  EXPECT_EQ(s.text, "");
  // max_tokens 0 means up to the context.
  SequenceRequest all = Request(0, 12, 500);
  Output a = Run(all);
  EXPECT_EQ(a.ids.size(), 12u);
  EXPECT_EQ(a.finish, FinishReason::kContextFull);
}

TEST_F(SchedulerTest, AResumedStreamSendsOnlyWhatFollowsTheTokensTheClientHas) {
  // The undisturbed run, and where a client's stream may have broken: after every count
  // of token ids, the resumed stream's ids and text are exactly the rest, and the two
  // together are the whole, byte for byte (held-back text included: a stop string).
  SequenceRequest whole = Request(24, 31);
  auto stream = scheduler_->Submit(whole);
  ASSERT_TRUE(stream.ok());
  std::vector<std::string> texts;  // each token event's text, as a client received it
  Output all;
  for (;;) {
    auto e = (*stream)->Next(std::chrono::seconds(30));
    ASSERT_TRUE(e.has_value());
    if (!e->ids.empty()) texts.push_back(e->text);
    all.text += e->text;
    all.ids.insert(all.ids.end(), e->ids.begin(), e->ids.end());
    if (e->last) {
      all.finish = e->finish;
      break;
    }
  }
  ASSERT_EQ(all.ids.size(), 24u);
  ASSERT_EQ(texts.size(), 24u) << "one event per token";
  for (int n : {0, 1, 7, 23, 24}) {
    SequenceRequest resumed = whole;
    resumed.resume_after = n;
    const Output rest = Run(resumed);
    ASSERT_TRUE(rest.status.ok()) << rest.status;
    EXPECT_EQ(rest.ids, std::vector<int32_t>(all.ids.begin() + n, all.ids.end())) << n;
    std::string had;  // what the client received before its stream broke
    for (int i = 0; i < n; ++i) had += texts[i];
    EXPECT_EQ(had + rest.text, all.text) << n;
    EXPECT_EQ(rest.finish, all.finish);
    EXPECT_EQ(rest.usage.completion_tokens, 24) << "usage counts the whole completion";
  }
}

TEST_F(SchedulerTest, RefusesBadRequestsAndAFullQueueAtOnce) {
  SchedulerConfig c;
  c.max_running = 1;
  c.max_waiting = 2;
  Make(c);
  EXPECT_THAT(std::string(scheduler_->Submit(SequenceRequest{}).status().message()),
              HasSubstr("empty"));
  SequenceRequest big = Request(1, 1, 600);
  EXPECT_THAT(std::string(scheduler_->Submit(big).status().message()),
              HasSubstr("does not fit the context of 512"));
  pipeline_->Pause();
  std::vector<std::shared_ptr<RequestStream>> ok;
  absl::Status refused;
  for (int i = 0; i < 6 && refused.ok(); ++i) {
    auto s = scheduler_->Submit(Request(5, i));
    if (s.ok()) {
      ok.push_back(*s);
    } else {
      refused = s.status();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let one be admitted
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(scheduler_->Stats().rejected, 1u);
  pipeline_->Resume();
  for (auto& s : ok) EXPECT_TRUE(Drain(*s).status.ok());
}

// max_tokens beyond what fits is refused at once, never cut: over the context, and over a
// KV cache smaller than the context; a request without max_tokens gets what is left.
TEST_F(SchedulerTest, MaxTokensBeyondTheRoomIsRefusedAndNoneGetsWhatIsLeft) {
  Make(SchedulerConfig{}, {}, /*kv_blocks=*/4);  // 64 tokens of cache, context 512
  auto over_context = scheduler_->Submit(Request(600, 1));
  EXPECT_EQ(over_context.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(over_context.status().message()),
              HasSubstr("max_tokens 600 plus the prompt's 5 tokens exceeds the model's context "
                        "of 512 tokens"));
  Output exact = Run(Request(59, 2));  // also: the pipeline is attached from here on
  EXPECT_EQ(exact.ids.size(), 59u);
  auto over_cache = scheduler_->Submit(Request(100, 1));
  EXPECT_EQ(over_cache.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(over_cache.status().message()),
              HasSubstr("max_tokens 100 plus the prompt's 5 tokens exceeds the KV cache of 64 "
                        "tokens"));
  Output rest = Run(Request(0, 3));
  EXPECT_TRUE(rest.status.ok()) << rest.status;
  EXPECT_EQ(rest.ids.size(), 59u);
}

TEST_F(SchedulerTest, StopAdmittingRefusesNewOnesAndFinishesTheRest) {
  pipeline_->Pause();
  auto running = scheduler_->Submit(Request(5, 1));
  ASSERT_TRUE(running.ok());
  scheduler_->StopAdmitting(absl::UnavailableError("draining"));
  auto late = scheduler_->Submit(Request(5, 2));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(scheduler_->Idle());
  pipeline_->Resume();
  EXPECT_TRUE(Drain(**running).status.ok());
  EXPECT_TRUE(scheduler_->Idle());
}

TEST_F(SchedulerTest, ACancelledSequenceIsReleasedOnTheStages) {
  auto s = scheduler_->Submit(Request(400, 5));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Next(std::chrono::seconds(30)).has_value());  // on the stages now
  (*s)->Cancel();
  Output o = Drain(**s);
  EXPECT_EQ(o.finish, FinishReason::kCancelled);
  // The release goes out with the next frame, or alone when nothing else runs.
  for (int i = 0; i < 500 && pipeline_->released().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(pipeline_->released().size(), 1u);
  EXPECT_EQ(scheduler_->Stats().kv_blocks_reserved, 0);
}

TEST_F(SchedulerTest, ALostBatchIsSentAgainAfterItsDeadline) {
  Make({}, {.batch = std::chrono::milliseconds(300)});
  pipeline_->Lose(1);
  SequenceRequest r = Request(6, 9);
  Output o = Run(r);
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, Expected(r, 6));
  EXPECT_EQ(scheduler_->Stats().lost_batches, 1u);
}

TEST_F(SchedulerTest, DetachedSequencesResumeOnTheNextPipelineWithTheSameText) {
  SequenceRequest r = Request(40, 77, 10);
  // The pipeline stops by itself after 5 tokens: the sequence is mid-stream whenever this
  // thread gets to pull the pipeline away.
  pipeline_->PauseAfter(5);
  auto s = scheduler_->Submit(r);
  ASSERT_TRUE(s.ok());
  std::vector<int32_t> got;
  while (got.size() < 5) {
    auto e = (*s)->Next(std::chrono::seconds(30));
    ASSERT_TRUE(e.has_value());
    got.insert(got.end(), e->ids.begin(), e->ids.end());
  }
  EXPECT_EQ(got.size(), 5u);
  scheduler_->Detach(absl::UnavailableError("stage 1 lost"));
  EXPECT_EQ(scheduler_->Submit(Request(1, 1)).ok(), true);  // still queued, not refused
  pipeline_->Resume();
  Attach(2, 2, 256);
  Output rest = Drain(**s);
  ASSERT_TRUE(rest.status.ok()) << rest.status;
  got.insert(got.end(), rest.ids.begin(), rest.ids.end());
  EXPECT_EQ(got, Expected(r, 40));  // nothing repeated, nothing missing
  EXPECT_EQ(scheduler_->Stats().resumed, 1u);
  // On the new plan the sequence was prefilled again from position 0: prompt + generated.
  bool reprefilled = false;
  for (const StageFrame& f : pipeline_->frames()) {
    if (f.plan_id == 2 && !f.slots.empty() && f.slots.front().pos == 0 && f.slots.size() > 10) {
      reprefilled = true;
    }
  }
  EXPECT_TRUE(reprefilled);
  // Each sequence's sampling went to each plan once, with its first frame there (position
  // 0): a steady decode step carries tokens only.
  std::map<std::pair<uint64_t, uint64_t>, int> admitted;  // (plan, seed): frames admitting it
  for (const StageFrame& f : pipeline_->frames()) {
    std::set<SeqId> starting, admitting;
    for (const TokenSlot& t : f.slots) {
      if (t.pos == 0) starting.insert(t.seq);
    }
    for (const SequenceSampling& a : f.admit) {
      admitting.insert(a.seq);
      ++admitted[{f.plan_id, a.params.seed}];
    }
    EXPECT_EQ(admitting, starting) << "plan " << f.plan_id << " batch " << f.batch_id;
  }
  using Key = std::pair<uint64_t, uint64_t>;
  EXPECT_EQ(admitted, (std::map<Key, int>{{{1, 77}, 1}, {{2, 77}, 1}, {{2, 1}, 1}}));
}

// A second replica for hand-over: its own scheduler over its own fake pipeline (plan 9,
// 2 stages, blocks of 16), stopped before the pipeline goes.
struct OtherReplica {
  OtherReplica(const Tokenizer& tok, int64_t kv_blocks)
      : scheduler(std::make_shared<Scheduler>(SchedulerConfig{}, tok, 512, 512)),
        pipeline(std::make_unique<FakePipeline>([s = scheduler](StepResult r) { s->OnResult(r); })) {
    scheduler->Start();
    PipelineSpec p;
    p.plan_id = 9;
    p.num_stages = 2;
    p.kv_blocks = kv_blocks;
    p.kv_block_size = 16;
    p.max_batch_tokens = 64;
    p.first_stage = pipeline->MakeSender(9);
    scheduler->Attach(std::move(p));
  }
  ~OtherReplica() { scheduler->Stop(); }
  std::shared_ptr<Scheduler> scheduler;
  std::unique_ptr<FakePipeline> pipeline;
};

TEST_F(SchedulerTest, HandedOverSequencesGoOnInAnotherSchedulerWithTheSameText) {
  OtherReplica replica(*tok_, 256);
  const std::shared_ptr<Scheduler>& other = replica.scheduler;

  SequenceRequest r = Request(40, 77, 10);
  pipeline_->PauseAfter(5);
  auto s = scheduler_->Submit(r);
  ASSERT_TRUE(s.ok());
  std::vector<int32_t> got;
  while (got.size() < 5) {
    auto e = (*s)->Next(std::chrono::seconds(30));
    ASSERT_TRUE(e.has_value());
    got.insert(got.end(), e->ids.begin(), e->ids.end());
  }
  scheduler_->Detach(absl::UnavailableError("stage 1 lost"));
  SequenceRequest queued = Request(12, 5);
  auto w = scheduler_->Submit(queued);  // waits: no pipeline
  ASSERT_TRUE(w.ok());
  scheduler_->HandOver(other);
  Output rest = Drain(**s);
  ASSERT_TRUE(rest.status.ok()) << rest.status;
  got.insert(got.end(), rest.ids.begin(), rest.ids.end());
  EXPECT_EQ(got, Expected(r, 40));  // nothing repeated, nothing missing
  Output second = Drain(**w);
  ASSERT_TRUE(second.status.ok()) << second.status;
  EXPECT_EQ(second.ids, Expected(queued, 12));
  EXPECT_EQ(scheduler_->Stats().handed_over, 2u);
  EXPECT_TRUE(scheduler_->Idle());
  EXPECT_EQ(other->Stats().resumed, 1u);
  EXPECT_EQ(other->Stats().kv_blocks_reserved, 0);  // its books closed on both
  // The moved sequence was prefilled from position 0 on the other pipeline.
  bool reprefilled = false;
  for (const StageFrame& f : replica.pipeline->frames()) {
    if (!f.slots.empty() && f.slots.front().pos == 0 && f.slots.size() > 10) reprefilled = true;
  }
  EXPECT_TRUE(reprefilled);
}

TEST_F(SchedulerTest, ASequenceLongerThanTheOtherCacheEndsNamingIt) {
  OtherReplica replica(*tok_, /*kv_blocks=*/2);  // 32 positions
  const std::shared_ptr<Scheduler>& other = replica.scheduler;
  pipeline_->PauseAfter(2);
  auto s = scheduler_->Submit(Request(60, 3, 10));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Next(std::chrono::seconds(30)).has_value());
  scheduler_->HandOver(other);
  Output o = Drain(**s);
  EXPECT_EQ(o.status.code(), absl::StatusCode::kResourceExhausted) << o.status;
  EXPECT_THAT(std::string(o.status.message()), HasSubstr("KV blocks"));
  EXPECT_TRUE(other->Idle());
  pipeline_->Resume();
}

TEST_F(SchedulerTest, FailAllEndsEverySequenceWithTheReason) {
  pipeline_->Pause();
  auto a = scheduler_->Submit(Request(50, 1));
  auto b = scheduler_->Submit(Request(50, 2));
  ASSERT_TRUE(a.ok() && b.ok());
  scheduler_->FailAll(absl::UnavailableError("stage 2 (worker w2) stopped responding"));
  for (auto* s : {&*a, &*b}) {
    Output o = Drain(**s);
    EXPECT_EQ(o.status.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(o.status.message()), HasSubstr("worker w2"));
  }
  pipeline_->Resume();
}

// A first stage that cannot be reached (its worker died): every send fails.
class DeadLink : public ActivationSender {
 public:
  absl::Status Send(StageFrame) override {
    return absl::UnavailableError("link to the next stage at 10.0.0.9:7001 is down");
  }
  void Close() override {}
};

TEST_F(SchedulerTest, AFirstStageThatStaysUnreachableFailsRequestsWithUnavailable) {
  Make({}, {.link_retry = std::chrono::milliseconds(20), .link_grace = std::chrono::milliseconds(300)});
  std::atomic<int> told{0};
  scheduler_->SetLinkErrorHandler([&](const absl::Status&) { ++told; });
  PipelineSpec p;
  p.plan_id = 5;
  p.num_stages = 2;
  p.kv_blocks = 64;
  p.first_stage = std::make_shared<DeadLink>();
  scheduler_->Attach(std::move(p));
  for (int i = 0; i < 2; ++i) {
    Output o = Run(Request(8, 1));
    EXPECT_EQ(o.status.code(), absl::StatusCode::kUnavailable) << o.status;
    EXPECT_THAT(o.status.message(), HasSubstr("cannot reach the first stage"));
    EXPECT_THAT(o.status.message(), HasSubstr("10.0.0.9:7001"));
    EXPECT_TRUE(o.ids.empty());
  }
  EXPECT_GT(told.load(), 2);  // the controller hears of every failed send
}

TEST_F(SchedulerTest, ASendThatFailsLosesNothingWhenANewPipelineComes) {
  Make({}, {.link_retry = std::chrono::milliseconds(20)});
  PipelineSpec dead;
  dead.plan_id = 5;
  dead.num_stages = 2;
  dead.kv_blocks = 64;
  dead.first_stage = std::make_shared<DeadLink>();
  scheduler_->Attach(std::move(dead));
  SequenceRequest r = Request(12, 31);
  auto s = scheduler_->Submit(r);
  ASSERT_TRUE(s.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a few failed sends
  Attach(6, 2, 256);  // the controller's new plan
  Output o = Drain(**s);
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, Expected(r, 12));
}

}  // namespace
}  // namespace cascade
