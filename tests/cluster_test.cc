// End-to-end cluster tests: a coordinator and three worker processes serve a model split
// in three stages, on loopback and with every process in its own network namespace.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <set>
#include <future>
#include <thread>

#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "model/model_source.h"
#include "model/test_models.h"
#include "model/test_util.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/cluster_fixture.h"
#include "local/local_engine.h"
#include "transport/factory.h"
#include "transport/tcp_link.h"

namespace cascade {
namespace {

using ::testing::AnyOf;
using testing::Cluster;
using testing::ClusterOptions;
using ::testing::HasSubstr;

std::string TestModel() {
  const std::string tiny = testing::SharedPath("models/tiny-llama/tiny-llama-f16.gguf");
  return testing::PathExists(tiny) ? tiny : testing::BundledModel();
}

struct Generated {
  grpc::Status status;
  std::string text;
  std::vector<int32_t> ids;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage;
};

// Streams a generation to its end; `on_response` (if given) sees what has arrived so far
// after each response.
Generated Generate(v1::Inference::Stub& stub, const v1::GenerateRequest& req,
                   std::chrono::milliseconds deadline = std::chrono::seconds(120),
                   const std::function<void(const Generated&)>& on_response = nullptr) {
  Generated g;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
    g.text += r.text();
    g.ids.insert(g.ids.end(), r.token_ids().begin(), r.token_ids().end());
    if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) g.finish = r.finish_reason();
    if (r.has_usage()) g.usage = r.usage();
    if (on_response) on_response(g);
  }
  g.status = reader->Finish();
  return g;
}

// A request to the single process (LocalEngine) read to its end, as Generate reads one.
Generated DrainLocal(RequestStream& stream) {
  Generated g;
  for (;;) {
    auto e = stream.Next(std::chrono::seconds(60));
    if (!e) {
      g.status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no event in 60 s");
      return g;
    }
    g.text += e->text;
    g.ids.insert(g.ids.end(), e->ids.begin(), e->ids.end());
    if (e->last) return g;
  }
}

v1::GenerateRequest Request(const std::string& prompt, int max_tokens, float temperature,
                            uint64_t seed) {
  v1::GenerateRequest req;
  req.set_prompt(prompt);
  req.set_max_tokens(max_tokens);
  req.mutable_sampling()->set_temperature(temperature);
  req.mutable_sampling()->set_top_k(temperature > 0 ? 40 : 0);
  req.mutable_sampling()->set_top_p(0.95f);
  req.mutable_sampling()->set_seed(seed);
  req.mutable_sampling()->set_has_seed(true);
  return req;
}

// Where the processes run and which data plane carries the frames.
struct Network {
  bool netns;
  const char* data_plane;  // "tcp" or "grpc"
};
void PrintTo(const Network& n, std::ostream* os) {
  *os << (n.netns ? "netns" : "loopback") << ", " << n.data_plane << " data plane";
}

class ClusterTest : public ::testing::TestWithParam<Network> {
 protected:
  void SetUp() override {
    ClusterOptions o;
    o.model = TestModel();
    o.netns = GetParam().netns;
    // An F32 KV cache: the greedy ids are compared with the single process's (F32) exactly.
    o.coordinator_flags = {"--kv-sequences", "20", "--kv-type", "f32", "--max-running", "32",
                           "--data-plane", GetParam().data_plane};
    cluster_ = std::make_unique<Cluster>(o);
    if (!cluster_->ok()) GTEST_SKIP() << cluster_->skip_reason();
    cluster_->StartWorkers();
    ASSERT_TRUE(cluster_->WaitServing()) << cluster_->Logs();
  }
  void TearDown() override {
    if (HasFailure() && cluster_) std::cerr << cluster_->Logs();
  }
  std::unique_ptr<Cluster> cluster_;
};

TEST_P(ClusterTest, ThreeStagesGiveTheSingleProcessGreedyIds) {
  auto status = cluster_->Status();
  ASSERT_EQ(status.stages_size(), 3) << status.DebugString();
  // Frames travel on the data plane the coordinator was asked for.
  for (const auto& s : status.stages()) {
    EXPECT_EQ(s.data_address().rfind("tcp://", 0) == 0, std::string(GetParam().data_plane) == "tcp")
        << s.data_address();
  }
  // The single process (one stage, in-process) on the same prompt.
  auto src = ModelSource::Open(TestModel());
  ASSERT_TRUE(src.ok());
  auto tok = Tokenizer::FromSource(**src);
  ASSERT_TRUE(tok.ok());
  auto local = LocalEngine::Create(**src, **tok, {});
  ASSERT_TRUE(local.ok()) << local.status();
  SequenceRequest g;
  g.prompt =
      *(*tok)->Encode("The quick brown fox jumps over the lazy dog. Once upon a time", true, true);
  g.sampling = SamplingParams::Greedy();
  g.max_tokens = 32;
  g.ignore_eos = true;
  auto one = (*local)->scheduler().Submit(g);
  ASSERT_TRUE(one.ok());
  const Generated want = DrainLocal(**one);
  ASSERT_TRUE(want.status.ok()) << want.status.error_message();

  v1::GenerateRequest req;
  for (int32_t id : g.prompt) req.add_prompt_ids(id);
  req.set_max_tokens(32);
  req.set_ignore_eos(true);
  req.mutable_sampling()->set_temperature(0);
  auto stub = cluster_->Inference();
  Generated got = Generate(*stub, req);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.ids, want.ids);
  EXPECT_EQ(got.text, want.text);
  const std::string ref = testing::SharedPath("models/tiny-llama/f16.greedy32.ids");
  if (TestModel() != testing::BundledModel() && testing::PathExists(ref)) {
    std::ifstream in(ref);
    std::vector<int32_t> all;
    int32_t v;
    while (in >> v) all.push_back(v);
    EXPECT_EQ(got.ids, std::vector<int32_t>(all.begin() + g.prompt.size(), all.end()));
  }
}

TEST_P(ClusterTest, SixteenConcurrentStreamsEachGetTheirSoloText) {
  const char* prompts[] = {"Once upon a time", "The little dog", "In the park", "Tom said",
                           "A big red ball",   "She was happy",  "The sun was", "One day"};
  auto stub = cluster_->Inference();
  std::vector<v1::GenerateRequest> reqs;
  for (int i = 0; i < 16; ++i) {
    reqs.push_back(Request(prompts[i % 8], 24 + i, i % 3 == 0 ? 0.0f : 0.8f, 7000 + i));
  }
  std::vector<Generated> solo;
  for (const auto& r : reqs) solo.push_back(Generate(*stub, r));
  std::vector<Generated> together(16);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      auto s = cluster_->Inference();
      together[i] = Generate(*s, reqs[i]);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(solo[i].status.ok()) << solo[i].status.error_message();
    ASSERT_TRUE(together[i].status.ok()) << together[i].status.error_message();
    EXPECT_FALSE(solo[i].ids.empty());
    EXPECT_EQ(together[i].text, solo[i].text) << "stream " << i;
    EXPECT_EQ(together[i].ids, solo[i].ids) << "stream " << i;
  }
}

TEST_P(ClusterTest, PromptsSharingABeginningGetTheSingleProcessTextFromThePrefixCache) {
  auto src = ModelSource::Open(TestModel());
  ASSERT_TRUE(src.ok());
  auto tok = Tokenizer::FromSource(**src);
  ASSERT_TRUE(tok.ok());
  LocalEngineOptions lo;
  lo.scheduler.prefix_cache = false;  // the reference computes every prompt whole
  auto local = LocalEngine::Create(**src, **tok, lo);
  ASSERT_TRUE(local.ok()) << local.status();
  std::vector<int32_t> beginning = *(*tok)->Encode(
      "Once upon a time there was a little girl named Lily. She loved to play outside in the "
      "sun with her dog.", true, false);
  const size_t n = beginning.size();
  while (beginning.size() < 100) beginning.push_back(beginning[1 + beginning.size() % (n - 1)]);
  const char* suffixes[] = {" Lily ran", " The dog barked", " She said", " They played", " Mom"};
  std::vector<v1::GenerateRequest> reqs;
  std::vector<Generated> want;
  for (int i = 0; i < 5; ++i) {
    SequenceRequest g;
    g.prompt = beginning;
    const std::vector<int32_t> more = *(*tok)->Encode(suffixes[i], false, false);
    g.prompt.insert(g.prompt.end(), more.begin(), more.end());
    g.sampling.temperature = 0.8f;
    g.sampling.top_k = 40;
    g.sampling.top_p = 0.95f;
    g.sampling.seed = 300 + i;
    g.max_tokens = 28;  // the first request's prompt and answer fill 4 blocks of 32
    g.ignore_eos = true;
    auto one = (*local)->scheduler().Submit(g);
    ASSERT_TRUE(one.ok());
    want.push_back(DrainLocal(**one));
    ASSERT_TRUE(want.back().status.ok()) << want.back().status.error_message();
    v1::GenerateRequest req = Request("", 28, 0.8f, 300 + i);
    req.clear_prompt();
    for (int32_t id : g.prompt) req.add_prompt_ids(id);
    req.set_ignore_eos(true);
    reqs.push_back(req);
  }
  // The first alone fills the cache; the others come at once and start from it.
  auto stub = cluster_->Inference();
  std::vector<Generated> got(5);
  got[0] = Generate(*stub, reqs[0]);
  std::vector<std::thread> threads;
  for (int i = 1; i < 5; ++i) {
    threads.emplace_back([&, i] { got[i] = Generate(*cluster_->Inference(), reqs[i]); });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(got[0].status.ok()) << got[0].status.error_message();
  std::vector<int32_t> first(reqs[0].prompt_ids().begin(), reqs[0].prompt_ids().end());
  first.insert(first.end(), got[0].ids.begin(), got[0].ids.end());
  ASSERT_GE(first.size(), 128u);
  uint64_t hits = 0;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].ids, want[i].ids) << "request " << i;
    EXPECT_EQ(got[i].text, want[i].text) << "request " << i;
    // 3 blocks of 32 whole, then, copied on every stage, the rows of the 4th block (the
    // first request's) up to where the prompts part: the beginning's last 4 tokens at
    // least, and never the prompt's last one.
    const int32_t n = reqs[i].prompt_ids_size();
    int32_t rows = 0;
    while (96 + rows + 1 < n && reqs[i].prompt_ids(96 + rows) == first[96 + rows]) ++rows;
    if (i > 0) {
      EXPECT_GE(rows, 4);
    }
    EXPECT_EQ(got[i].usage.cached_tokens(), i == 0 ? 0 : 96 + rows) << "request " << i;
    hits += i == 0 ? 0 : 96 + rows;
  }
  const v1::SchedulerStatus q = cluster_->Status().scheduler();
  EXPECT_EQ(q.prefix_hit_tokens(), hits);
}

// Speculative decoding through 3 worker processes (--speculative ngram): drafted tokens
// are verified in one trip, and every stream gets the single process's text, greedy and
// seeded, alone and 6 at once.
void ExpectSpeculationKeepsTheText(const Network& net, std::vector<std::string> spec_flags) {
  ClusterOptions o;
  o.model = TestModel();
  o.netns = net.netns;
  o.coordinator_flags = {"--kv-sequences", "20", "--kv-type", "f32", "--data-plane",
                         net.data_plane, "--spec-tokens", "4"};
  o.coordinator_flags.insert(o.coordinator_flags.end(), spec_flags.begin(), spec_flags.end());
  Cluster cluster(o);
  if (!cluster.ok()) GTEST_SKIP() << cluster.skip_reason();
  cluster.StartWorkers();
  ASSERT_TRUE(cluster.WaitServing()) << cluster.Logs();
  auto src = ModelSource::Open(TestModel());
  ASSERT_TRUE(src.ok());
  auto tok = Tokenizer::FromSource(**src);
  ASSERT_TRUE(tok.ok());
  auto local = LocalEngine::Create(**src, **tok, LocalEngineOptions{});
  ASSERT_TRUE(local.ok()) << local.status();
  const char* prompts[] = {
      "Lily had a red ball. Lily had a red ball. Lily had a red ball. Lily had",
      "Tom and Sam went to the park. Tom and Sam went to the park. Tom and", "Once upon a time",
      "One day a little bird sang. One day a little bird sang. One day", "The sun was hot",
      "Mom said no. Mom said no. Mom said"};
  for (int batch : {1, 6}) {
    std::vector<v1::GenerateRequest> reqs;
    std::vector<Generated> want;
    for (int i = 0; i < batch; ++i) {
      const float temperature = i % 2 ? 0.8f : 0.0f;
      v1::GenerateRequest req = Request(prompts[i], 32, temperature, 900 + i);
      req.set_ignore_eos(true);
      reqs.push_back(req);
      SequenceRequest g;
      g.prompt = *(*tok)->Encode(prompts[i], true, false);
      g.sampling = temperature > 0 ? SamplingParams() : SamplingParams::Greedy();
      g.sampling.temperature = temperature;
      g.sampling.top_k = temperature > 0 ? 40 : 0;
      g.sampling.top_p = 0.95f;
      g.sampling.seed = 900 + i;
      g.max_tokens = 32;
      g.ignore_eos = true;
      auto one = (*local)->scheduler().Submit(g);
      ASSERT_TRUE(one.ok());
      want.push_back(DrainLocal(**one));
    }
    std::vector<Generated> got(batch);
    std::vector<std::thread> threads;
    for (int i = 0; i < batch; ++i) {
      threads.emplace_back([&, i] { got[i] = Generate(*cluster.Inference(), reqs[i]); });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < batch; ++i) {
      ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
      EXPECT_EQ(got[i].ids, want[i].ids) << "batch " << batch << ", request " << i;
      EXPECT_EQ(got[i].text, want[i].text) << "batch " << batch << ", request " << i;
    }
  }
  const v1::SchedulerStatus q = cluster.Status().scheduler();
  EXPECT_GT(q.spec_draft_tokens(), 0u);
  EXPECT_GT(q.spec_accepted_tokens(), 0u);
  std::cerr << q.spec_accepted_tokens() << " of " << q.spec_draft_tokens()
            << " drafted tokens accepted\n";
  if (::testing::Test::HasFailure()) std::cerr << cluster.Logs();
}

class SpeculativeClusterTest : public ::testing::TestWithParam<Network> {};

TEST_P(SpeculativeClusterTest, StreamsGetTheSingleProcessTextAndDraftsAreAccepted) {
  ExpectSpeculationKeepsTheText(GetParam(), {"--speculative", "ngram"});
}

// The same with a draft model run by the coordinator (--speculative draft): here the model
// itself, whose greedy drafts the pipeline accepts.
TEST(SpeculativeDraftClusterTest, StreamsGetTheSingleProcessTextAndDraftsAreAccepted) {
  ExpectSpeculationKeepsTheText(Network{false, "tcp"},
                                {"--speculative", "draft", "--draft-model", TestModel()});
}

INSTANTIATE_TEST_SUITE_P(Network, SpeculativeClusterTest,
                         ::testing::Values(Network{false, "tcp"}, Network{false, "grpc"}),
                         [](const auto& info) {
                           return absl::StrCat(info.param.netns ? "netns" : "loopback", "_",
                                               info.param.data_plane);
                         });

// Two replicas of one stage each (--replicas 2): every request gets the single process's
// text whichever replica serves it, and routing spreads requests (round-robin) or sends a
// conversation's next turn where its beginning is cached (cache-aware).
class ReplicaClusterTest : public ::testing::TestWithParam<Network> {
 protected:
  void Start(const std::string& routing) {
    ClusterOptions o;
    o.model = TestModel();
    o.netns = GetParam().netns;
    o.workers = 2;
    o.min_stages = 1;
    o.coordinator_flags = {"--kv-sequences", "20", "--kv-type", "f32", "--max-running", "32",
                           "--data-plane", GetParam().data_plane, "--replicas", "2",
                           "--routing", routing};
    cluster_ = std::make_unique<Cluster>(o);
    if (!cluster_->ok()) GTEST_SKIP() << cluster_->skip_reason();
    cluster_->StartWorkers();
    ASSERT_TRUE(cluster_->WaitServing()) << cluster_->Logs();
    // Health says SERVING once one replica serves: wait for both.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      const v1::ClusterStatusResponse s = cluster_->Status();
      int serving = 0;
      for (const auto& r : s.replicas()) serving += r.state() == "serving" ? 1 : 0;
      if (serving == 2) break;
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << cluster_->Logs();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    auto src = ModelSource::Open(TestModel());
    ASSERT_TRUE(src.ok());
    auto tok = Tokenizer::FromSource(**src);
    ASSERT_TRUE(tok.ok());
    tok_ = std::move(*tok);
    LocalEngineOptions lo;
    lo.scheduler.prefix_cache = false;
    auto local = LocalEngine::Create(**src, *tok_, lo);
    ASSERT_TRUE(local.ok()) << local.status();
    local_ = std::move(*local);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) std::cerr << cluster_->Logs();
  }
  // The request for `prompt` on the cluster, and the single process's answer to it.
  std::pair<v1::GenerateRequest, Generated> Case(const std::vector<int32_t>& prompt,
                                                 uint64_t seed) {
    SequenceRequest g;
    g.prompt = prompt;
    g.sampling.temperature = 0.8f;
    g.sampling.top_k = 40;
    g.sampling.top_p = 0.95f;
    g.sampling.seed = seed;
    g.max_tokens = 16;
    g.ignore_eos = true;
    auto one = local_->scheduler().Submit(g);
    EXPECT_TRUE(one.ok());
    Generated want = one.ok() ? DrainLocal(**one) : Generated{};
    v1::GenerateRequest req = Request("", 16, 0.8f, seed);
    req.clear_prompt();
    for (int32_t id : prompt) req.add_prompt_ids(id);
    req.set_ignore_eos(true);
    return {req, want};
  }
  std::vector<int32_t> Tokens(const std::string& text, bool bos) {
    return *tok_->Encode(text, bos, false);
  }
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<LocalEngine> local_;
};

TEST_P(ReplicaClusterTest, RoundRobinSpreadsRequestsAndEachGetsTheSingleProcessText) {
  Start("round-robin");
  if (IsSkipped()) return;
  ASSERT_EQ(cluster_->Status().replicas_size(), 2);
  const char* prompts[] = {"Once upon a time", "The little dog", "In the park", "Tom said",
                           "A big red ball", "She was happy"};
  std::vector<std::pair<v1::GenerateRequest, Generated>> cases;
  for (int i = 0; i < 6; ++i) cases.push_back(Case(Tokens(prompts[i], true), 40 + i));
  std::vector<Generated> got(6);
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] { got[i] = Generate(*cluster_->Inference(), cases[i].first); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].ids, cases[i].second.ids) << "request " << i;
    EXPECT_EQ(got[i].text, cases[i].second.text) << "request " << i;
  }
  const v1::ClusterStatusResponse s = cluster_->Status();
  EXPECT_EQ(s.replicas(0).scheduler().completed(), 3u);
  EXPECT_EQ(s.replicas(1).scheduler().completed(), 3u);
  EXPECT_EQ(s.scheduler().completed(), 6u);
  std::set<std::string> workers;
  for (const auto& st : s.stages()) workers.insert(absl::StrCat(st.replica(), st.worker_id()));
  EXPECT_EQ(workers.size(), 2u);  // one stage each, on two workers
}

TEST_P(ReplicaClusterTest, CacheAwareRoutingSendsTheNextTurnWhereItsBeginningIsCached) {
  Start("cache-aware");
  if (IsSkipped()) return;
  std::vector<int32_t> history = Tokens(
      "Once upon a time there was a little girl named Lily. She loved to play outside in the "
      "sun with her dog.", true);
  const size_t n = history.size();
  while (history.size() < 100) history.push_back(history[1 + history.size() % (n - 1)]);
  const char* turns[] = {" Lily ran", " The dog barked", " She said", " They played"};
  auto stub = cluster_->Inference();
  for (int turn = 0; turn < 4; ++turn) {
    std::vector<int32_t> prompt = history;
    const std::vector<int32_t> more = Tokens(turns[turn], false);
    prompt.insert(prompt.end(), more.begin(), more.end());
    auto [req, want] = Case(prompt, 70 + turn);
    const Generated got = Generate(*stub, req);
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    EXPECT_EQ(got.ids, want.ids) << "turn " << turn;
    // From the second turn on, the replica that served the first holds the 3 full blocks.
    EXPECT_EQ(got.usage.cached_tokens(), turn == 0 ? 0 : 96) << "turn " << turn;
  }
  const v1::ClusterStatusResponse s = cluster_->Status();
  uint64_t hits = 0;
  for (const auto& r : s.replicas()) hits += r.scheduler().prefix_hit_tokens();
  EXPECT_EQ(hits, 3u * 96);
}

INSTANTIATE_TEST_SUITE_P(Network, ReplicaClusterTest,
                         ::testing::Values(Network{false, "tcp"}, Network{true, "tcp"},
                                           Network{false, "grpc"}),
                         [](const auto& info) {
                           return absl::StrCat(info.param.netns ? "netns" : "loopback", "_",
                                               info.param.data_plane);
                         });

INSTANTIATE_TEST_SUITE_P(Network, ClusterTest,
                         ::testing::Values(Network{false, "tcp"}, Network{true, "tcp"},
                                           Network{false, "grpc"}),
                         [](const auto& info) {
                           return absl::StrCat(info.param.netns ? "netns" : "loopback", "_",
                                               info.param.data_plane);
                         });

class ClusterFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterOptions o;
    o.model = testing::BundledModel();
    o.coordinator_flags = {"--kv-sequences", "4", "--max-waiting", "8"};
    cluster_ = std::make_unique<Cluster>(o);
    ASSERT_TRUE(cluster_->ok());
  }
  void TearDown() override {
    if (HasFailure() && cluster_) std::cerr << cluster_->Logs();
  }
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(ClusterFaults, HealthIsNotServingUntilEveryStageIsLoaded) {
  // No workers yet: the coordinator answers, but not as SERVING.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto h = cluster_->Health();
  while (h == grpc::health::v1::HealthCheckResponse::UNKNOWN &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    h = cluster_->Health();
  }
  EXPECT_EQ(h, grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  auto stub = cluster_->Inference();
  Generated early = Generate(*stub, Request("Once", 4, 0, 1));
  EXPECT_EQ(early.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(early.status.error_message(), HasSubstr("loading"));
  cluster_->StartWorkers();
  ASSERT_TRUE(cluster_->WaitServing());
  EXPECT_TRUE(Generate(*stub, Request("Once", 4, 0, 1)).status.ok());
}

TEST_F(ClusterFaults, BadRequestsGetInvalidArgumentAndOthersAreUnaffected) {
  cluster_->StartWorkers();
  ASSERT_TRUE(cluster_->WaitServing());
  auto stub = cluster_->Inference();
  // A long generation runs while bad requests arrive.
  Generated reference = Generate(*stub, Request("Once upon a time", 150, 0.0f, 1));
  ASSERT_TRUE(reference.status.ok());
  Generated during;
  std::thread runner([&] {
    auto s = cluster_->Inference();
    during = Generate(*s, Request("Once upon a time", 150, 0.0f, 1));
  });
  auto expect_invalid = [&](const v1::GenerateRequest& r, const std::string& what) {
    Generated g = Generate(*stub, r);
    EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << what;
    EXPECT_THAT(g.status.error_message(), HasSubstr(what));
  };
  v1::GenerateRequest empty;
  empty.set_max_tokens(5);
  expect_invalid(empty, "empty");
  v1::GenerateRequest too_long = Request("", 5, 0, 1);
  for (int i = 0; i < 600; ++i) too_long.add_prompt_ids(403);
  expect_invalid(too_long, "does not fit the context");
  expect_invalid(Request("hi", 2000000000, 0, 1), "max_tokens");
  expect_invalid(Request("hi", -5, 0, 1), "max_tokens");
  v1::GenerateRequest hot = Request("hi", 5, 500.0f, 1);
  expect_invalid(hot, "temperature");
  v1::GenerateRequest nan_p = Request("hi", 5, 1.0f, 1);
  nan_p.mutable_sampling()->set_top_p(std::numeric_limits<float>::quiet_NaN());
  expect_invalid(nan_p, "top_p");
  v1::GenerateRequest bad_id = Request("", 5, 0, 1);
  bad_id.add_prompt_ids(1);
  bad_id.add_prompt_ids(-7);
  expect_invalid(bad_id, "outside the vocabulary");
  v1::GenerateRequest wrong_model = Request("hi", 5, 0, 1);
  wrong_model.set_model("gpt-17");
  EXPECT_EQ(Generate(*stub, wrong_model).status.error_code(), grpc::StatusCode::NOT_FOUND);
  runner.join();
  ASSERT_TRUE(during.status.ok()) << during.status.error_message();
  EXPECT_EQ(during.text, reference.text);
}

TEST_F(ClusterFaults, GarbageAndMisshapenFramesAreRejectedWhileServingContinues) {
  cluster_->StartWorkers();
  ASSERT_TRUE(cluster_->WaitServing());
  auto status = cluster_->Status();
  ASSERT_EQ(status.stages_size(), 3);
  const std::string stage1 = status.stages(1).address();
  auto stub = cluster_->Inference();
  Generated reference = Generate(*stub, Request("Once upon a time", 100, 0.0f, 1));
  Generated during;
  std::thread runner([&] {
    auto s = cluster_->Inference();
    during = Generate(*s, Request("Once upon a time", 100, 0.0f, 1));
  });
  auto channel = grpc::CreateChannel(stage1, grpc::InsecureChannelCredentials());
  // 1. Bytes that are not a frame at all: the stream is closed with an error.
  {
    grpc::GenericStub generic(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::CompletionQueue cq;
    auto call = generic.PrepareCall(&ctx, "/cascade.v1.StagePipe/Forward", &cq);
    call->StartCall(reinterpret_cast<void*>(1));
    void* tag;
    bool ok;
    cq.Next(&tag, &ok);
    const std::string junk = "\xff\xff\xff\xff garbage that is not a protobuf \x01\x02";
    grpc::Slice slice(junk);
    grpc::ByteBuffer bb(&slice, 1);
    call->Write(bb, reinterpret_cast<void*>(2));
    cq.Next(&tag, &ok);
    call->WritesDone(reinterpret_cast<void*>(3));
    cq.Next(&tag, &ok);
    grpc::Status st;
    call->Finish(&st, reinterpret_cast<void*>(4));
    while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(4)) {
    }
    EXPECT_FALSE(st.ok());
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }
  // 2. Well-formed frames from a stranger (who read the plan id but has no link key),
  //    with a right shape, a wrong one, a batch id of the pipeline's: the stream is ended
  //    with PERMISSION_DENIED at the first, and nothing of them reaches the stage (it
  //    would otherwise turn a bad frame into an error for the batch it names).
  {
    auto pipe = v1::StagePipe::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = pipe->Forward(&ctx);
    std::vector<v1::ActivationFrame> bad(3);
    for (auto& f : bad) {
      f.set_version(1);
      f.set_plan_id(status.plan_id());
      f.set_stage(1);
      f.set_batch_id(1);
      f.add_seq_ids(1);
      f.add_positions(3);
      f.add_tokens(5);
      f.add_want_logits(false);
      f.set_dtype(v1::DTYPE_F32);
      f.add_shape(1);
      f.add_shape(64);
      f.set_payload(std::string(64 * 4, '\0'));
    }
    bad[1].set_shape(1, 65);
    bad[2].set_link_key("a guess of 16 b!");
    for (const auto& f : bad) stream->Write(f);
    stream->WritesDone();
    v1::FrameAck ack;
    size_t acks = 0;
    while (stream->Read(&ack)) ++acks;
    const grpc::Status st = stream->Finish();
    EXPECT_EQ(acks, 0u);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  }
  // 3. The same on the stage's TCP data plane: bytes that are not a frame close that
  //    connection; a misshapen frame is answered with a rejection.
  const std::string tcp_stage1 = status.stages(1).data_address();
  auto tcp_address = ParseAddress(tcp_stage1);
  ASSERT_TRUE(tcp_address.ok() && tcp_address->scheme == Scheme::kTcp) << tcp_stage1;
  {
    auto fd = ConnectTcp(tcp_address->host_port, std::chrono::seconds(5));
    ASSERT_TRUE(fd.ok()) << fd.status();
    const std::string junk = "\xff\xff\xff\xff garbage that is not a frame at all";
    ASSERT_EQ(::send(fd->get(), junk.data(), junk.size(), MSG_NOSIGNAL), ssize_t(junk.size()));
    timeval tv{5, 0};
    ::setsockopt(fd->get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char c;
    EXPECT_EQ(::recv(fd->get(), &c, 1, 0), 0) << "the stage kept a garbage connection open";
  }
  {
    // A stranger's frame on TCP: its connection is dropped, nothing is answered.
    auto owned = MakeTcpActivationSender(tcp_address->host_port,
                                         {.connect_timeout = std::chrono::seconds(5), .link_key = {}});
    ActivationSender& sender = *owned;
    StageFrame f;
    f.plan_id = status.plan_id();
    f.stage = 1;
    f.batch_id = 2;
    f.slots.push_back({.token = 5, .seq = 1, .pos = 3, .want_logits = false});
    f.hidden.assign(64, 0.0f);
    ASSERT_TRUE(sender.Send(f).ok());
    absl::Status later;
    for (int i = 0; i < 200 && later.ok(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      later = sender.Send(f);  // reconnects each time: each is refused the same way
    }
    EXPECT_EQ(sender.rejected(), 0u);
    sender.Close();
  }
  runner.join();
  ASSERT_TRUE(during.status.ok()) << during.status.error_message();
  EXPECT_EQ(during.text, reference.text);
  // None of it touched the pipeline.
  EXPECT_TRUE(Generate(*stub, Request("Once", 8, 0.0f, 1)).status.ok());
  EXPECT_EQ(cluster_->Status().scheduler().failed(), 0u);
}

TEST_F(ClusterFaults, AClientThatCancelsFreesItsKvBlocksOnEveryStage) {
  cluster_->StartWorkers();
  ASSERT_TRUE(cluster_->WaitServing());
  auto stub = cluster_->Inference();
  v1::GenerateRequest long_one = Request("Once upon a time", 400, 0.0f, 1);
  long_one.set_ignore_eos(true);
  // The client goes away once its stream has started (an event, not a timer).
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub->Generate(&ctx, long_one);
  v1::GenerateResponse r;
  size_t received = 0;
  while (received == 0 && reader->Read(&r)) received += r.token_ids_size();
  ASSERT_GT(received, 0u);
  ctx.TryCancel();
  const auto cancelled = std::chrono::steady_clock::now();
  while (reader->Read(&r)) received += r.token_ids_size();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(received, 400u);
  // Nothing reserved, and every stage's cache empty again: the handler notices within
  // 20 ms, the scheduler frees the blocks at its next step, and the release reaches the
  // stages with the next frame; their heartbeats (every second) report it.
  bool freed = false;
  while (!freed && std::chrono::steady_clock::now() - cancelled < std::chrono::seconds(10)) {
    auto s = cluster_->Status();
    freed = s.scheduler().kv_blocks_reserved() == 0 && s.scheduler().running() == 0;
    for (const auto& st : s.stages()) freed &= st.stats().kv_blocks_used() == 0;
    if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - cancelled).count();
  EXPECT_TRUE(freed) << cluster_->Status().DebugString();
  // Within two heartbeats of the cancel.
  EXPECT_LT(seconds, 2.5);
  std::cerr << "KV blocks freed on every stage " << seconds << " s after the cancel\n";
  // A full queue refuses at once with RESOURCE_EXHAUSTED.
  std::vector<std::thread> flood;
  std::atomic<int> exhausted{0};
  for (int i = 0; i < 24; ++i) {
    flood.emplace_back([&] {
      auto s = cluster_->Inference();
      Generated r = Generate(*s, long_one);
      if (r.status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++exhausted;
    });
  }
  for (auto& t : flood) t.join();
  EXPECT_GT(exhausted.load(), 0);
}

TEST_F(ClusterFaults, AWorkerThatDiesIsPlannedAroundAndItsStreamGoesOn) {
  cluster_->StartWorkers();
  ASSERT_TRUE(cluster_->WaitServing());
  auto stub = cluster_->Inference();
  v1::GenerateRequest r = Request("Once upon a time", 450, 0.8f, 77);
  r.set_ignore_eos(true);
  const Generated undisturbed = Generate(*stub, r);
  ASSERT_TRUE(undisturbed.status.ok()) << undisturbed.status.error_message();
  ASSERT_EQ(undisturbed.ids.size(), 450u);
  // Once the stream has started, worker 1 is stopped (the stream freezes there, so it
  // cannot finish first whatever the machine's speed) and then killed.
  Generated resumed;
  std::promise<void> started;
  std::thread runner([&] {
    auto s = cluster_->Inference();
    bool signalled = false;
    resumed = Generate(*s, r, std::chrono::seconds(120), [&](const Generated& so_far) {
      if (!signalled && !so_far.ids.empty()) {
        cluster_->worker(1).Signal(SIGSTOP);
        started.set_value();
        signalled = true;
      }
    });
    if (!signalled) started.set_value();
  });
  ASSERT_EQ(started.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready);
  cluster_->worker(1).Signal(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  runner.join();
  // The stream went on, on the workers that remain, with exactly the undisturbed text.
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.error_message();
  EXPECT_EQ(resumed.ids, undisturbed.ids);
  EXPECT_EQ(resumed.text, undisturbed.text);
  EXPECT_EQ(cluster_->Health(), grpc::health::v1::HealthCheckResponse::SERVING);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(seconds, 30.0);
  auto status = cluster_->Status();
  ASSERT_EQ(status.stages_size(), 2);  // the model fits on the two that remain
  for (const auto& st : status.stages()) EXPECT_NE(st.worker_id(), "w1");
  EXPECT_EQ(status.scheduler().failed(), 0u);
}

// max_tokens beyond the context: the same refusal from both APIs, naming the context,
// the prompt's tokens and max_tokens (as vLLM's and OpenAI's), never a silent cut; without
// max_tokens a request gets what the context leaves after its prompt.
void ExpectOneMaxTokensRule(httplib::Client& http, v1::Inference::Stub& stub, int64_t context) {
  const std::string over_context =
      absl::StrCat("max_tokens ", context, " plus the prompt's 5 tokens exceeds the model's "
                   "context of ", context, " tokens");
  auto too_many = http.Post(
      "/v1/completions",
      absl::StrCat(R"({"prompt": "Once upon a time", "max_tokens": )", context, "}"),
      "application/json");
  ASSERT_TRUE(too_many);
  EXPECT_EQ(too_many->status, 400);
  EXPECT_THAT(too_many->body, HasSubstr(over_context));
  EXPECT_THAT(too_many->body, HasSubstr(R"("param":"max_tokens")"));
  Generated refused = Generate(stub, Request("Once upon a time", static_cast<int>(context), 0, 1));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.status.error_message(), over_context);
  // Without max_tokens a request gets what the context leaves after its prompt.
  v1::GenerateRequest unbounded = Request("Once upon a time", 0, 0, 1);
  unbounded.set_ignore_eos(true);
  Generated rest = Generate(stub, unbounded);
  ASSERT_TRUE(rest.status.ok()) << rest.status.error_message();
  EXPECT_EQ(static_cast<int64_t>(rest.ids.size()), context - 5);
  EXPECT_EQ(rest.finish, v1::FINISH_REASON_CONTEXT);
}

TEST(ClusterHttp, OpenAiCompatibleCompletions) {
  ClusterOptions o;
  o.model = testing::BundledModel();
  o.workers = 2;
  o.min_stages = 2;
  const int http_port = testing::FreePort();
  o.coordinator_flags = {"--http-listen", absl::StrCat("127.0.0.1:", http_port)};
  Cluster cluster(o);
  ASSERT_TRUE(cluster.ok());
  httplib::Client http("127.0.0.1", http_port);
  http.set_read_timeout(60, 0);
  ASSERT_TRUE(testing::WaitForPort("127.0.0.1", http_port, std::chrono::seconds(20)));
  auto loading = http.Get("/health");
  ASSERT_TRUE(loading);
  EXPECT_EQ(loading->status, 503);
  cluster.StartWorkers();
  ASSERT_TRUE(cluster.WaitServing()) << cluster.Logs();
  auto health = http.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto models = http.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_THAT(models->body, HasSubstr("stories260K"));

  // 300 idle connections (a client that opens sockets and sends nothing) hold no thread:
  // a valid request is answered at once.
  std::vector<int> idle;
  for (int i = 0; i < 300; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(http_port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    idle.push_back(fd);
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto busy = http.Post("/v1/completions", R"({"prompt": "Once", "max_tokens": 2})",
                        "application/json");
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 200);
  EXPECT_LT(waited, 1.0) << "a request waited behind 300 idle connections";
  for (int fd : idle) ::close(fd);

  // The same greedy text as the gRPC API.
  auto stub = cluster.Inference();
  Generated grpc_text = Generate(*stub, Request("Once upon a time", 30, 0.0f, 1));
  ASSERT_TRUE(grpc_text.status.ok());
  auto res = http.Post("/v1/completions",
                       R"({"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0})",
                       "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  nlohmann::json body = nlohmann::json::parse(res->body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], grpc_text.text);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 30);

  // Server-sent events add up to the same text and end with [DONE].
  auto sse = http.Post(
      "/v1/completions",
      R"({"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0, "stream": true})",
      "application/json");
  ASSERT_TRUE(sse);
  ASSERT_EQ(sse->status, 200);
  std::string streamed;
  size_t chunks = 0;
  for (size_t pos = 0; (pos = sse->body.find("data: ", pos)) != std::string::npos;) {
    const size_t end = sse->body.find("\n\n", pos);
    const std::string data = sse->body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]") break;
    streamed += nlohmann::json::parse(data)["choices"][0]["text"].get<std::string>();
    ++chunks;
  }
  EXPECT_EQ(streamed, grpc_text.text);
  EXPECT_GT(chunks, 5u);
  EXPECT_THAT(sse->body, HasSubstr("data: [DONE]"));

  // A sampled stream names its seed in its first chunk; the same request with that seed
  // and resume_after_tokens (the tokens a client counted, via logprobs) streams the rest.
  auto Events = [](const std::string& body) {
    std::vector<nlohmann::json> out;
    for (size_t pos = 0; (pos = body.find("data: ", pos)) != std::string::npos;) {
      const size_t end = body.find("\n\n", pos);
      const std::string data = body.substr(pos + 6, end - pos - 6);
      pos = end;
      if (data != "[DONE]") out.push_back(nlohmann::json::parse(data));
    }
    return out;
  };
  const std::string sampled =
      R"("prompt": "Once upon a time", "max_tokens": 20, "temperature": 0.9, "logprobs": 0, "stream": true)";
  auto whole = http.Post("/v1/completions", "{" + sampled + "}", "application/json");
  ASSERT_TRUE(whole);
  const std::vector<nlohmann::json> events = Events(whole->body);
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events[0]["choices"][0].contains("seed")) << events[0].dump();
  const uint64_t seed = events[0]["choices"][0]["seed"].get<uint64_t>();
  std::string all_text, had;
  size_t tokens = 0;
  for (const auto& e : events) {
    const auto& c = e["choices"][0];
    all_text += c["text"].get<std::string>();
    if (tokens < 8) had += c["text"].get<std::string>();
    if (c["logprobs"].is_object()) tokens += c["logprobs"]["tokens"].size();
  }
  ASSERT_EQ(tokens, 20u);
  // The client had the chunks of its first 8 tokens (one token a chunk here).
  auto rest = http.Post("/v1/completions",
                        absl::StrCat("{", sampled, R"(, "seed": )", seed,
                                     R"(, "resume_after_tokens": 8})"),
                        "application/json");
  ASSERT_TRUE(rest);
  ASSERT_EQ(rest->status, 200) << rest->body;
  std::string rest_text;
  for (const auto& e : Events(rest->body)) rest_text += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(had + rest_text, all_text);

  // Bad requests: OpenAI-shaped errors, and the server goes on.
  for (const char* bad :
       {R"({"prompt": 5})", R"({"prompt": "x", "max_tokens": "many"})", "{not json",
        R"({"prompt": "x", "temperature": -1})", R"({"prompt": "x", "n": 17})"}) {
    auto r = http.Post("/v1/completions", bad, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad;
    EXPECT_THAT(r->body, HasSubstr("\"error\"")) << bad;
  }
  ExpectOneMaxTokensRule(
      http, *stub, nlohmann::json::parse(models->body)["data"][0]["context_length"].get<int64_t>());

  auto chat = http.Post("/v1/chat/completions",
                        R"({"messages": [{"role": "user", "content": "Hi"}]})", "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 400);  // stories260K is a base model without a chat template
  EXPECT_THAT(chat->body, HasSubstr("chat template"));
  EXPECT_THAT(chat->body, HasSubstr("--chat-template"));
  // Unknown paths and methods: JSON errors.
  auto missing = http.Get("/v2/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_THAT(missing->body, HasSubstr("\"error\""));
  auto wrong = http.Get("/v1/completions");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->get_header_value("Allow"), "POST");
  // A CORS preflight from a browser.
  auto preflight = http.Options("/v1/completions", {{"Origin", "http://example.com"},
                                                    {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(http.Get("/health")->status, 200);
}

}  // namespace
}  // namespace cascade
