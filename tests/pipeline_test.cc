// The serving path in one process: the scheduler over real pipeline stages
// (tools/local_engine.h), against references computed by independent implementations
// (llama2.c's run.c greedy ids for stories260K), and against itself alone versus batched.
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_models.h"
#include "model/test_util.h"
#include "local/local_engine.h"
#include "serving/router.h"

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
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::kCancelled;
  absl::Status status;
  StreamUsage usage;
};

Output Drain(RequestStream& s) {
  Output o;
  for (;;) {
    auto e = s.Next(std::chrono::seconds(120));
    if (!e) {
      o.status = absl::DeadlineExceededError("no event in 120 s");
      return o;
    }
    o.text += e->text;
    o.ids.insert(o.ids.end(), e->ids.begin(), e->ids.end());
    o.logprobs.insert(o.logprobs.end(), e->logprobs.begin(), e->logprobs.end());
    if (e->last) {
      o.finish = e->finish;
      o.status = e->status;
      o.usage = e->usage;
      return o;
    }
  }
}

struct CacheOptions {
  bool prefix_cache = true;
  int block_size = kDefaultKvBlockSize;
  int64_t blocks = 0;  // 0: 16 sequences' worth
  Speculative speculative = Speculative::kOff;
  const DraftModel* draft = nullptr;  // with kDraft
};

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
  std::unique_ptr<LocalEngine> Engine(int stages, int64_t prefill_chunk = 256,
                                      CacheOptions cache = CacheOptions()) {
    LocalEngineOptions o;
    o.stages = EvenLayerRanges(5, stages);
    o.stage.kv_sequences = 16;
    o.stage.kv_block_size = cache.block_size;
    o.stage.kv_blocks = cache.blocks;
    o.scheduler.prefill_chunk = prefill_chunk;
    o.scheduler.prefix_cache = cache.prefix_cache;
    o.scheduler.speculative = cache.speculative;
    o.draft = cache.draft;
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

// Prefix cache. Prompts that share a long beginning, as chats with one system prompt do.
class PrefixCacheTest : public PipelineTest {
 protected:
  std::vector<int32_t> SharedBeginning() {
    std::vector<int32_t> ids = *tok_->Encode(
        "Once upon a time there was a little girl named Lily. She loved to play outside in "
        "the sun with her dog. One day she saw a big red ball in the park.",
        true, false);
    const size_t n = ids.size();
    while (ids.size() < 120) ids.push_back(ids[1 + ids.size() % (n - 1)]);
    return ids;
  }
  SequenceRequest WithSuffix(const std::vector<int32_t>& beginning, const std::string& suffix,
                             float temperature, uint64_t seed) {
    SequenceRequest r = Request(suffix, 24, temperature, seed);
    r.prompt.erase(r.prompt.begin());  // no second BOS
    r.prompt.insert(r.prompt.begin(), beginning.begin(), beginning.end());
    r.logprobs = true;
    return r;
  }
  // The first request alone (it fills the cache), then the others at once.
  std::vector<Output> Run(LocalEngine& engine, const std::vector<SequenceRequest>& reqs) {
    std::vector<Output> out;
    auto first = engine.scheduler().Submit(reqs[0]);
    EXPECT_TRUE(first.ok());
    if (!first.ok()) return out;
    out.push_back(Drain(**first));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 1; i < reqs.size(); ++i) {
      auto s = engine.scheduler().Submit(reqs[i]);
      EXPECT_TRUE(s.ok());
      if (s.ok()) streams.push_back(*s);
    }
    for (auto& s : streams) out.push_back(Drain(*s));
    return out;
  }
};

TEST_F(PrefixCacheTest, OutputWithACachedPrefixIsByteIdenticalToOutputWithout) {
  const std::vector<int32_t> beginning = SharedBeginning();
  const char* suffixes[] = {" Lily ran", " The dog barked", " She said", " They played",
                            " Mom came", " The ball"};
  for (float temperature : {0.0f, 0.9f}) {
    std::vector<SequenceRequest> reqs;
    for (int i = 0; i < 6; ++i) reqs.push_back(WithSuffix(beginning, suffixes[i], temperature, 77 + i));
    // A later turn of the first conversation: its prompt, its answer, more text.
    auto cached = Engine(3, 16, {.prefix_cache = true, .block_size = 8});
    auto plain = Engine(3, 16, {.prefix_cache = false, .block_size = 8});
    std::vector<Output> a = Run(*cached, reqs), b = Run(*plain, reqs);
    ASSERT_EQ(a.size(), reqs.size());
    ASSERT_EQ(b.size(), reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_TRUE(a[i].status.ok() && b[i].status.ok()) << a[i].status << b[i].status;
      EXPECT_EQ(a[i].text, b[i].text) << "request " << i << " at temperature " << temperature;
      EXPECT_EQ(a[i].ids, b[i].ids) << "request " << i;
      EXPECT_EQ(a[i].logprobs, b[i].logprobs) << "request " << i;  // bit for bit
      EXPECT_EQ(b[i].usage.cached_tokens, 0);
      // All but the first find the shared beginning's full blocks (120 tokens: 15 of 8),
      // then the rows of the 16th block that their suffix shares with the first request's
      // prompt and answer (the block it cached), up to the prompt's last token.
      std::vector<int32_t> first = reqs[0].prompt;
      first.insert(first.end(), a[0].ids.begin(), a[0].ids.end());
      int32_t rows = 0;
      while (rows < 7 && 120 + rows + 1 < static_cast<int32_t>(reqs[i].prompt.size()) &&
             reqs[i].prompt[120 + rows] == first[120 + rows]) {
        ++rows;
      }
      EXPECT_EQ(a[i].usage.cached_tokens, i == 0 ? 0 : 120 + rows) << "request " << i;
    }
    SequenceRequest next = reqs[0];
    next.prompt.insert(next.prompt.end(), a[0].ids.begin(), a[0].ids.end());
    const std::vector<int32_t> more = *tok_->Encode(" And then", false, false);
    next.prompt.insert(next.prompt.end(), more.begin(), more.end());
    auto s1 = cached->scheduler().Submit(next);
    auto s2 = plain->scheduler().Submit(next);
    ASSERT_TRUE(s1.ok() && s2.ok());
    Output n1 = Drain(**s1), n2 = Drain(**s2);
    EXPECT_EQ(n1.ids, n2.ids);
    EXPECT_EQ(n1.logprobs, n2.logprobs);
    // The earlier turn's prompt and the answer's full blocks were cached as it ran.
    const int32_t earlier = static_cast<int32_t>(reqs[0].prompt.size() + a[0].ids.size()) - 1;
    EXPECT_EQ(n1.usage.cached_tokens, std::min<int32_t>(earlier, static_cast<int32_t>(next.prompt.size()) - 1) / 8 * 8);
    const SchedulerStats st = cached->scheduler().Stats();
    EXPECT_GT(st.prefix_hit_tokens, 0u);
    EXPECT_LT(st.prefix_hit_tokens, st.prefix_queried_tokens);
  }
}

// Prompts that part inside a block (a chat whose next turn resends the history, retyped):
// the later one starts from a copy of the rows they share and computes the rest; its
// text and logprobs are those without the cache, greedy and seeded, through 3 stages.
TEST_F(PrefixCacheTest, APromptPartingInsideACachedBlockCopiesTheSharedRows) {
  const std::vector<int32_t> beginning = SharedBeginning();  // 120 tokens: 15 blocks of 8
  for (float temperature : {0.0f, 0.9f}) {
    auto cached = Engine(3, 16, {.prefix_cache = true, .block_size = 8});
    auto plain = Engine(3, 16, {.prefix_cache = false, .block_size = 8});
    const SequenceRequest first = WithSuffix(beginning, " Lily ran to the park and played", temperature, 5);
    // Shares the first block after the beginning up to a token inside it.
    SequenceRequest second = first;
    second.prompt.resize(beginning.size() + 5);
    const std::vector<int32_t> more = *tok_->Encode(" with the red ball", false, false);
    second.prompt.insert(second.prompt.end(), more.begin(), more.end());
    second.sampling.seed = 6;
    ASSERT_NE(second.prompt[beginning.size() + 5], first.prompt[beginning.size() + 5]);
    std::vector<Output> a = Run(*cached, {first, second}), b = Run(*plain, {first, second});
    ASSERT_EQ(a.size(), 2u);
    ASSERT_EQ(b.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_TRUE(a[i].status.ok() && b[i].status.ok()) << a[i].status << b[i].status;
      EXPECT_EQ(a[i].ids, b[i].ids) << "request " << i << " at temperature " << temperature;
      EXPECT_EQ(a[i].logprobs, b[i].logprobs) << "request " << i;  // bit for bit
    }
    // The beginning's 15 blocks whole and 5 rows of the 16th.
    EXPECT_EQ(a[1].usage.cached_tokens, 125);
    EXPECT_EQ(cached->scheduler().Stats().prefix_hit_tokens, 125u);
  }
}

TEST_F(PrefixCacheTest, RequestsArrivingTogetherComputeTheirSharedBeginningOnce) {
  const std::vector<int32_t> beginning = SharedBeginning();
  const char* suffixes[] = {" Lily ran", " The dog barked", " She said", " They played"};
  auto cached = Engine(3, 16, {.prefix_cache = true, .block_size = 8});
  auto plain = Engine(3, 16, {.prefix_cache = false, .block_size = 8});
  std::vector<std::shared_ptr<RequestStream>> a, b;
  for (int i = 0; i < 4; ++i) {
    const SequenceRequest r = WithSuffix(beginning, suffixes[i], 0.9f, 40 + i);
    auto sa = cached->scheduler().Submit(r);
    auto sb = plain->scheduler().Submit(r);
    ASSERT_TRUE(sa.ok() && sb.ok());
    a.push_back(*sa);
    b.push_back(*sb);
  }
  int from_cache = 0;
  for (int i = 0; i < 4; ++i) {
    const Output oa = Drain(*a[i]), ob = Drain(*b[i]);
    ASSERT_TRUE(oa.status.ok() && ob.status.ok());
    EXPECT_EQ(oa.ids, ob.ids) << "request " << i;
    EXPECT_EQ(oa.logprobs, ob.logprobs) << "request " << i;
    from_cache += oa.usage.cached_tokens == 120 ? 1 : 0;
  }
  // One computed the beginning; the other three waited for it and started after it.
  EXPECT_EQ(from_cache, 3);
  const SchedulerStats st = cached->scheduler().Stats();
  EXPECT_EQ(st.prefix_hit_tokens, 3u * 120);
}

TEST_F(PrefixCacheTest, ManyDistinctPromptsEvictWithoutARefusalOrALeakedBlock) {
  // 48 blocks of 8 tokens: room for about four of these sequences at once.
  auto engine = Engine(3, 32, {.prefix_cache = true, .block_size = 8, .blocks = 48});
  const char* words[] = {"cat", "dog", "sun", "tree", "ball", "bird", "cake", "boat"};
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<SequenceRequest> reqs;
  for (int i = 0; i < 24; ++i) {
    std::string text = "Once upon a time";
    for (int k = 0; k < 12; ++k) absl::StrAppend(&text, " the ", words[(i + k * (1 + i % 5)) % 8]);
    SequenceRequest r = Request(text, 16, 0, 0);
    r.ignore_eos = true;
    reqs.push_back(r);
    auto s = engine->scheduler().Submit(r);
    ASSERT_TRUE(s.ok()) << s.status();
    streams.push_back(*s);
  }
  for (auto& s : streams) {
    Output o = Drain(*s);
    ASSERT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.ids.size(), 16u);
  }
  SchedulerStats st = engine->scheduler().Stats();
  EXPECT_EQ(st.kv_blocks_reserved, 0);
  EXPECT_EQ(st.prefix_blocks_in_use, 0);
  EXPECT_GT(st.prefix_blocks_cached, 0);
  EXPECT_LE(st.prefix_blocks_cached, 48);
  // Every stage: no sequence left, every block free or cached with no user.
  for (int i = 0; i < 3; ++i) {
    const KvCache& kv = engine->pipeline().executor(i).stage().kv_cache();
    for (int k = 0; k < 2000 && kv.num_sequences() > 0; ++k) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(kv.num_sequences(), 0u) << "stage " << i;
    EXPECT_EQ(kv.free_blocks() + kv.idle_cached_blocks(), 48) << "stage " << i;
    EXPECT_EQ(kv.idle_cached_blocks(), kv.cached_blocks()) << "stage " << i;
    for (int32_t b = 0; b < 48; ++b) EXPECT_EQ(kv.RefCount(b), 0) << "stage " << i;
  }
  // The latest prompt is still cached; the first was evicted to make room.
  auto again = engine->scheduler().Submit(reqs.back());
  ASSERT_TRUE(again.ok());
  Output o = Drain(**again);
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_GT(o.usage.cached_tokens, 0);
  auto oldest = engine->scheduler().Submit(reqs.front());
  ASSERT_TRUE(oldest.ok());
  o = Drain(**oldest);
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_LT(o.usage.cached_tokens, (static_cast<int32_t>(reqs.front().prompt.size()) - 1) / 8 * 8);
}

TEST_F(PrefixCacheTest, AStageThatLostItsCachedBlocksCostsAPrefillNotAWrongAnswer) {
  const std::vector<int32_t> beginning = SharedBeginning();
  const SequenceRequest first = WithSuffix(beginning, " Lily ran", 0.9f, 5);
  const SequenceRequest second = WithSuffix(beginning, " The dog barked", 0.9f, 6);
  auto plain = Engine(3, 16, {.prefix_cache = false, .block_size = 8});
  auto want = plain->scheduler().Submit(second);
  ASSERT_TRUE(want.ok());
  const Output expected = Drain(**want);

  auto engine = Engine(3, 16, {.prefix_cache = true, .block_size = 8});
  auto s = engine->scheduler().Submit(first);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(Drain(**s).status.ok());
  // Stage 1 forgets what it cached (as a restarted stage would); the scheduler's books
  // still say the beginning is cached. Its executor waits for a frame meanwhile.
  KvCache& kv = engine->pipeline().executor(1).stage().kv_cache();
  for (int k = 0; k < 2000 && kv.num_sequences() > 0; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_GT(kv.cached_blocks(), 0);
  kv.Clear();
  auto t = engine->scheduler().Submit(second);
  ASSERT_TRUE(t.ok());
  const Output got = Drain(**t);
  ASSERT_TRUE(got.status.ok()) << got.status;
  EXPECT_EQ(got.ids, expected.ids);
  EXPECT_EQ(got.logprobs, expected.logprobs);
  EXPECT_EQ(got.usage.cached_tokens, 0);  // computed again
  // The books were corrected: the next request finds the beginning cached again.
  auto u = engine->scheduler().Submit(second);
  ASSERT_TRUE(u.ok());
  const Output again = Drain(**u);
  EXPECT_EQ(again.ids, expected.ids);
  // The beginning's 15 blocks, then the rows of the 16th that the same prompt cached: all
  // but the prompt's last token, whose logits give the first sample.
  EXPECT_EQ(again.usage.cached_tokens, static_cast<int32_t>(second.prompt.size()) - 1);
}

// Routing over replicas: two in-process engines stand for two pipelines.
uint64_t RunConversations(PipelineTest& t, Router& router, std::vector<std::string>* texts,
                          std::vector<Output>* outputs,
                          const std::function<SequenceRequest(int, int, const std::vector<int32_t>&)>& turn,
                          std::vector<std::unique_ptr<LocalEngine>>& engines) {
  std::vector<std::vector<int32_t>> history(3);
  uint64_t hits = 0;
  for (int k = 0; k < 4; ++k) {
    for (int c = 0; c < 3; ++c) {
      SequenceRequest r = turn(c, k, history[c]);
      std::vector<Scheduler*> replicas = {&engines[0]->scheduler(), &engines[1]->scheduler()};
      const int chosen = router.Choose(r.prompt, replicas);
      EXPECT_GE(chosen, 0);
      if (chosen < 0) return hits;
      auto s = replicas[chosen]->Submit(r);
      EXPECT_TRUE(s.ok());
      if (!s.ok()) return hits;
      Output o = Drain(**s);
      EXPECT_TRUE(o.status.ok()) << o.status;
      hits += static_cast<uint64_t>(o.usage.cached_tokens);
      history[c] = r.prompt;
      history[c].insert(history[c].end(), o.ids.begin(), o.ids.end());
      texts->push_back(o.text);
      outputs->push_back(o);
    }
  }
  (void)t;
  return hits;
}

TEST_F(PrefixCacheTest, CacheAwareRoutingSendsAConversationWhereItsHistoryIs) {
  // Three conversations of four turns, one request at a time; each turn is the history
  // (earlier prompt and answer) and a few more tokens.
  auto turn = [&](int c, int k, const std::vector<int32_t>& history) {
    const char* openers[] = {"Once upon a time there was a dog.", "The sun was hot that day.",
                             "Tom had a big red ball."};
    SequenceRequest r = Request(openers[c], 16, 0.8f, 100 * c + k);
    if (!history.empty()) {
      std::vector<int32_t> more = *tok_->Encode(" Then", false, false);
      r.prompt = history;
      r.prompt.insert(r.prompt.end(), more.begin(), more.end());
    }
    r.ignore_eos = true;
    return r;
  };
  std::map<Router::Policy, uint64_t> hits;
  std::map<Router::Policy, std::vector<std::string>> texts;
  for (Router::Policy policy : {Router::Policy::kCacheAware, Router::Policy::kRoundRobin}) {
    std::vector<std::unique_ptr<LocalEngine>> engines;
    engines.push_back(Engine(2, 16, {.prefix_cache = true, .block_size = 8}));
    engines.push_back(Engine(2, 16, {.prefix_cache = true, .block_size = 8}));
    Router router(policy);
    std::vector<Output> outputs;
    hits[policy] = RunConversations(*this, router, &texts[policy], &outputs, turn, engines);
  }
  RecordProperty("cached_tokens_cache_aware", std::to_string(hits[Router::Policy::kCacheAware]));
  RecordProperty("cached_tokens_round_robin", std::to_string(hits[Router::Policy::kRoundRobin]));
  // The same text either way (routing changes where, never what), and cache-aware
  // routing found at least 1.5x the cached tokens round-robin did.
  EXPECT_EQ(texts[Router::Policy::kCacheAware], texts[Router::Policy::kRoundRobin]);
  EXPECT_GT(hits[Router::Policy::kCacheAware], 0u);
  EXPECT_GE(hits[Router::Policy::kCacheAware], 1.5 * hits[Router::Policy::kRoundRobin])
      << "cache-aware " << hits[Router::Policy::kCacheAware] << ", round-robin "
      << hits[Router::Policy::kRoundRobin];
}

TEST_F(PrefixCacheTest, RoutingAvoidsABusyReplicaAndSkipsOnesNotServing) {
  auto busy = Engine(2, 16, {.prefix_cache = true, .block_size = 8});
  auto idle = Engine(2, 16, {.prefix_cache = true, .block_size = 8});
  SequenceRequest longer = Request("Once upon a time", 400, 0, 0);
  longer.ignore_eos = true;
  auto running = busy->scheduler().Submit(longer);
  ASSERT_TRUE(running.ok());
  ASSERT_TRUE((*running)->Next(std::chrono::seconds(30)).has_value());  // decoding
  const std::vector<int32_t> prompt = *tok_->Encode("The little bird sang", true, false);
  std::vector<Scheduler*> replicas = {&busy->scheduler(), &idle->scheduler()};
  for (Router::Policy p : {Router::Policy::kCacheAware, Router::Policy::kLeastLoaded}) {
    Router router(p);
    EXPECT_EQ(router.Choose(prompt, replicas), 1) << Router::PolicyName(p);
  }
  Router rr(Router::Policy::kRoundRobin);
  std::vector<Scheduler*> one = {nullptr, &idle->scheduler()};
  EXPECT_EQ(rr.Choose(prompt, one), 1);
  EXPECT_EQ(rr.Choose(prompt, one), 1);
  EXPECT_EQ(Router(Router::Policy::kCacheAware).Choose(prompt, std::vector<Scheduler*>{nullptr}), -1);
  EXPECT_EQ(Router::ParsePolicy("cache-aware"), Router::Policy::kCacheAware);
  EXPECT_FALSE(Router::ParsePolicy("random").has_value());
  (*running)->Cancel();
  Drain(**running);
}

}  // namespace
}  // namespace cascade

namespace cascade {
namespace {

// Speculative decoding through 3 in-process stages: drafts from the text so far, verified
// in one trip, give exactly the text, ids and logprobs of plain decoding.
class SpeculativeTest : public PipelineTest {
 protected:
  std::vector<Output> RunAll(LocalEngine& engine, const std::vector<SequenceRequest>& reqs) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const SequenceRequest& r : reqs) {
      auto s = engine.scheduler().Submit(r);
      EXPECT_TRUE(s.ok()) << s.status();
      if (s.ok()) streams.push_back(*s);
    }
    std::vector<Output> out;
    for (auto& s : streams) out.push_back(Drain(*s));
    return out;
  }
  std::vector<SequenceRequest> Requests(int n, float temperature) {
    // Text that repeats (drafts pass) and text that does not.
    const char* prompts[] = {
        "Lily had a red ball. Lily had a red ball. Lily had a red ball. Lily had",
        "Once upon a time", "Tom and Sam went to the park. Tom and Sam went to the",
        "The sun was hot", "One day a little bird sang. One day a little bird",
        "She was happy"};
    std::vector<SequenceRequest> reqs;
    for (int i = 0; i < n; ++i) {
      SequenceRequest r = Request(prompts[i % 6], 40, temperature, 300 + i);
      r.logprobs = true;
      r.ignore_eos = true;
      reqs.push_back(r);
    }
    return reqs;
  }
  // Runs `reqs` on both engines and expects the same ids, text and logprobs (bit for bit),
  // 40 tokens each; returns the speculating engine's outputs.
  std::vector<Output> RunBoth(LocalEngine& spec, LocalEngine& plain,
                              const std::vector<SequenceRequest>& reqs) {
    const std::vector<Output> a = RunAll(spec, reqs), b = RunAll(plain, reqs);
    EXPECT_EQ(a.size(), reqs.size());
    EXPECT_EQ(b.size(), reqs.size());
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      EXPECT_TRUE(a[i].status.ok() && b[i].status.ok()) << a[i].status << b[i].status;
      EXPECT_EQ(a[i].ids, b[i].ids) << "request " << i;
      EXPECT_EQ(a[i].text, b[i].text) << "request " << i;
      EXPECT_EQ(a[i].logprobs, b[i].logprobs) << "request " << i;
      EXPECT_EQ(a[i].ids.size(), 40u);
    }
    return a;
  }
};

TEST_F(SpeculativeTest, TextAndLogprobsAreByteIdenticalWithAndWithoutSpeculation) {
  for (float temperature : {0.0f, 0.9f}) {
    for (int batch : {1, 6}) {
      auto spec = Engine(3, 256, {.block_size = 8, .speculative = Speculative::kNgram});
      auto plain = Engine(3, 256, {.block_size = 8});
      SCOPED_TRACE(absl::StrCat("temperature ", temperature, ", batch ", batch));
      const std::vector<SequenceRequest> reqs = Requests(batch, temperature);
      const std::vector<Output> a = RunBoth(*spec, *plain, reqs);
      if (HasFailure()) return;
      const SchedulerStats st = spec->scheduler().Stats();
      EXPECT_GT(st.spec_draft_tokens, 0u) << "batch " << batch;
      if (temperature == 0.0f) {
        EXPECT_GT(st.spec_accepted_tokens, 0u) << "batch " << batch;
      }
      EXPECT_LE(st.spec_accepted_tokens, st.spec_draft_tokens);
      EXPECT_EQ(plain->scheduler().Stats().spec_draft_tokens, 0u);
      // A later turn (the prompt and its answer, then more) starts from the blocks the
      // speculating run published, accepted drafts included, with the same text.
      SequenceRequest next = reqs[0];
      next.prompt.insert(next.prompt.end(), a[0].ids.begin(), a[0].ids.end());
      next.prompt.push_back(reqs[0].prompt[1]);
      const Output c = RunAll(*spec, {next})[0];
      const Output d = RunAll(*plain, {next})[0];
      ASSERT_TRUE(c.status.ok()) << c.status;
      EXPECT_EQ(c.ids, d.ids);
      EXPECT_EQ(c.logprobs, d.logprobs);
      EXPECT_GE(c.usage.cached_tokens, static_cast<int32_t>(reqs[0].prompt.size()) / 8 * 8 + 32);
    }
  }
}

// A draft model (here the model itself: its greedy drafts are what the pipeline samples
// at temperature 0) through 3 stages: the same ids, text and logprobs as plain decoding,
// greedy and seeded, and at temperature 0 nearly every draft is accepted.
TEST_F(SpeculativeTest, ADraftModelGivesTheSameTextAndIsAcceptedWhenItAgrees) {
  DraftModelOptions dopt;
  dopt.sequences = 3;  // fewer than the batch: drafters drop and rebuild sequences
  auto draft = DraftModel::Open(testing::BundledModel(), *tok_, dopt);
  ASSERT_TRUE(draft.ok()) << draft.status();
  for (float temperature : {0.0f, 0.9f}) {
    for (int batch : {1, 6}) {
      auto spec = Engine(3, 256,
                         {.block_size = 8, .speculative = Speculative::kDraft,
                          .draft = draft->get()});
      auto plain = Engine(3, 256, {.block_size = 8});
      SCOPED_TRACE(absl::StrCat("temperature ", temperature, ", batch ", batch));
      RunBoth(*spec, *plain, Requests(batch, temperature));
      const SchedulerStats st = spec->scheduler().Stats();
      EXPECT_GT(st.spec_draft_tokens, 0u) << "batch " << batch;
      if (temperature == 0.0f) {
        EXPECT_GE(st.spec_accepted_tokens * 10, st.spec_draft_tokens * 9)
            << st.spec_accepted_tokens << " of " << st.spec_draft_tokens << ", batch " << batch;
      }
    }
  }
}

// Without a draft model, kDraft is refused rather than quietly not drafting.
TEST_F(SpeculativeTest, DraftSpeculationWithoutADraftModelIsRefused) {
  LocalEngineOptions o;
  o.scheduler.speculative = Speculative::kDraft;
  auto e = LocalEngine::Create(*src_, *tok_, o);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), ::testing::HasSubstr("draft model"));
}

TEST_F(SpeculativeTest, ARequestThatOptsOutDraftsNothing) {
  auto spec = Engine(3, 256, {.speculative = Speculative::kNgram});
  std::vector<SequenceRequest> reqs = Requests(1, 0.0f);
  reqs[0].speculate = false;
  const Output o = RunAll(*spec, reqs)[0];
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(spec->scheduler().Stats().spec_draft_tokens, 0u);
}

}  // namespace
}  // namespace cascade
