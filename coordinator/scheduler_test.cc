#include "coordinator/scheduler.h"

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_models.h"
#include "worker/local_pipeline.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

// A scheduler over an in-process pipeline of the bundled model.
class Harness {
 public:
  explicit Harness(int stages, SchedulerOptions opt = {}) {
    src_ = std::move(*ModelSource::Open(testing::BundledModel()));
    tok_ = std::move(*Tokenizer::FromGguf(*src_->gguf()));
    StageOptions so;
    so.kv_sequences = 8;
    so.max_batch_tokens = 512;
    pipeline_ = std::move(
        *LocalPipeline::Create(*src_, EvenLayerRanges(5, stages), so, 1,
                               [this](StepResult r) { scheduler_->OnResult(std::move(r)); }));
    opt.plan_id = 1;
    opt.num_stages = stages;
    if (opt.kv_blocks == 0) opt.kv_blocks = pipeline_->executor(0).stage().kv_cache().num_blocks();
    opt.kv_block_size = 16;
    opt.context_length = src_->config().context_length;
    opt.vocab_size = src_->config().vocab_size;
    scheduler_ = std::make_unique<Scheduler>(opt, *tok_, pipeline_->first());
    scheduler_->Start();
  }
  ~Harness() {
    scheduler_->Stop();
    pipeline_->Stop();
  }

  struct Output {
    std::string text;
    std::vector<int32_t> ids;
    FinishReason finish;
    absl::Status status;
  };
  static Output Drain(RequestStream& s) {
    Output o;
    for (;;) {
      auto e = s.Next(std::chrono::seconds(60));
      if (!e) {
        o.status = absl::DeadlineExceededError("no event in 60 s");
        return o;
      }
      o.text += e->text;
      o.ids.insert(o.ids.end(), e->ids.begin(), e->ids.end());
      if (e->last) {
        o.finish = e->finish;
        o.status = e->status;
        return o;
      }
    }
  }
  SequenceRequest Request(const std::string& prompt, int max_tokens, float temperature,
                          uint64_t seed) {
    SequenceRequest r;
    r.prompt = *tok_->Encode(prompt, true, false);
    r.max_tokens = max_tokens;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    return r;
  }
  Output Run(SequenceRequest r) {
    auto s = scheduler_->Submit(std::move(r));
    EXPECT_TRUE(s.ok()) << s.status();
    return Drain(**s);
  }

  std::unique_ptr<ModelSource> src_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<LocalPipeline> pipeline_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST(Scheduler, GreedyThroughThreeStagesMatchesSingleProcess) {
  Harness h(3);
  auto one = Stage::Create(*h.src_, {});
  ASSERT_TRUE(one.ok());
  GenerationRequest g;
  g.prompt = *h.tok_->Encode("Once upon a time", true, false);
  g.sampling = SamplingParams::Greedy();
  g.max_tokens = 60;
  auto want = Generate(**one, *h.tok_, g, nullptr);
  ASSERT_TRUE(want.ok());
  Harness::Output got = h.Run(h.Request("Once upon a time", 60, 0.0f, 0));
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.ids, want->tokens);
  EXPECT_EQ(got.text, want->text);
  EXPECT_EQ(got.finish, FinishReason::kLength);
}

TEST(Scheduler, ConcurrentStreamsGetExactlyTheirSoloText) {
  const char* prompts[] = {"Once upon a time", "The dog",       "Lily and Tom",   "One day",
                           "The sun",          "A little bird", "Sam had a ball", "Mom said"};
  std::vector<Harness::Output> solo;
  {
    Harness h(3);
    for (int i = 0; i < 16; ++i) {
      solo.push_back(h.Run(h.Request(prompts[i % 8], 40, i % 2 ? 0.9f : 0.0f, 1000 + i)));
    }
  }
  Harness h(3);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 16; ++i) {
    auto s = h.scheduler_->Submit(h.Request(prompts[i % 8], 40, i % 2 ? 0.9f : 0.0f, 1000 + i));
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  for (int i = 0; i < 16; ++i) {
    Harness::Output o = Harness::Drain(*streams[i]);
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.text, solo[i].text) << "stream " << i;
    EXPECT_EQ(o.ids, solo[i].ids) << "stream " << i;
  }
  EXPECT_GT(h.scheduler_->Stats().batches, 40u);
}

TEST(Scheduler, StopStringsEosAndMaxTokens) {
  Harness h(2);
  SequenceRequest r = h.Request("Once upon a time", 200, 0.0f, 0);
  r.stop = {"Lily"};
  Harness::Output o = h.Run(r);
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_EQ(o.text, ", there was a little girl named ");
  Harness::Output m = h.Run(h.Request("Once upon a time", 3, 0.0f, 0));
  EXPECT_EQ(m.finish, FinishReason::kLength);
  EXPECT_EQ(m.ids.size(), 3u);
}

TEST(Scheduler, CancelFreesKvOnEveryStage) {
  Harness h(3);
  auto s = h.scheduler_->Submit(h.Request("Once upon a time", 400, 0.0f, 0));
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Next(std::chrono::seconds(30)).has_value());  // generating
  (*s)->Cancel();
  Harness::Output o = Harness::Drain(**s);
  EXPECT_EQ(o.finish, FinishReason::kCancelled);
  // The release travels with the next frames; give the pipeline a moment to apply it.
  for (int i = 0; i < 200; ++i) {
    bool any = false;
    for (int st = 0; st < 3; ++st) {
      any |= h.pipeline_->executor(st).stage().kv_cache().num_sequences() > 0;
    }
    if (!any) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int st = 0; st < 3; ++st) {
    EXPECT_EQ(h.pipeline_->executor(st).stage().kv_cache().num_sequences(), 0u) << st;
  }
  EXPECT_EQ(h.scheduler_->Stats().kv_blocks_reserved, 0);
}

TEST(Scheduler, BadRequestsAreRefusedAndOthersUnaffected) {
  SchedulerOptions opt;
  opt.max_waiting = 2;
  opt.max_running = 1;
  Harness h(2, opt);
  SequenceRequest empty;
  EXPECT_THAT(std::string(h.scheduler_->Submit(empty).status().message()), HasSubstr("empty"));
  SequenceRequest long_prompt = h.Request("x", 1, 0.0f, 0);
  long_prompt.prompt.assign(600, 403);
  auto st = h.scheduler_->Submit(long_prompt).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("does not fit the context of 512"));
  SequenceRequest bad_id = h.Request("x", 1, 0.0f, 0);
  bad_id.prompt.push_back(9999);
  EXPECT_THAT(std::string(h.scheduler_->Submit(bad_id).status().message()),
              HasSubstr("outside the vocabulary"));
  SequenceRequest absurd = h.Request("x", 1, 0.0f, 0);
  absurd.max_tokens = 2000000000;
  EXPECT_THAT(std::string(h.scheduler_->Submit(absurd).status().message()),
              HasSubstr("max_tokens"));
  SequenceRequest hot = h.Request("x", 1, 0.0f, 0);
  hot.sampling.temperature = -3;
  EXPECT_THAT(std::string(h.scheduler_->Submit(hot).status().message()), HasSubstr("temperature"));
  // Fill the queue: one running, two waiting, the next is refused at once.
  std::vector<std::shared_ptr<RequestStream>> ok;
  absl::Status refused;
  for (int i = 0; i < 6 && refused.ok(); ++i) {
    auto s = h.scheduler_->Submit(h.Request("Once upon a time", 100, 0.0f, 0));
    if (s.ok()) {
      ok.push_back(*s);
    } else {
      refused = s.status();
    }
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  for (auto& s : ok) EXPECT_TRUE(Harness::Drain(*s).status.ok());
}

// A first stage that cannot be reached (its worker died): every send fails.
class DeadLink : public ActivationSender {
 public:
  absl::Status Send(StageFrame) override {
    return absl::UnavailableError("link to the next stage at 10.0.0.9:7001 is down");
  }
  void Close() override {}
};

TEST(Scheduler, AnUnreachableFirstStageFailsRequestsWithUnavailable) {
  auto src = ModelSource::Open(testing::BundledModel());
  ASSERT_TRUE(src.ok()) << src.status();
  auto tok = Tokenizer::FromGguf(*(*src)->gguf());
  ASSERT_TRUE(tok.ok()) << tok.status();
  SchedulerOptions opt;
  opt.plan_id = 1;
  opt.num_stages = 2;
  opt.kv_blocks = 64;
  opt.kv_block_size = 16;
  opt.context_length = (*src)->config().context_length;
  opt.vocab_size = (*src)->config().vocab_size;
  Scheduler sched(opt, **tok, std::make_shared<DeadLink>());
  sched.Start();
  // Each request ends at once with UNAVAILABLE naming the unreachable stage (not a hang,
  // not INTERNAL), and the scheduler keeps taking requests.
  for (int i = 0; i < 2; ++i) {
    SequenceRequest r;
    r.prompt = *(*tok)->Encode("Once upon a time", true, false);
    r.max_tokens = 8;
    auto stream = sched.Submit(std::move(r));
    ASSERT_TRUE(stream.ok()) << stream.status();
    Harness::Output out = Harness::Drain(**stream);
    EXPECT_EQ(out.status.code(), absl::StatusCode::kUnavailable) << out.status;
    EXPECT_THAT(out.status.message(), HasSubstr("cannot reach the first stage"));
    EXPECT_THAT(out.status.message(), HasSubstr("10.0.0.9:7001"));
    EXPECT_TRUE(out.ids.empty());
  }
  sched.Stop();
}

}  // namespace
}  // namespace cascade
