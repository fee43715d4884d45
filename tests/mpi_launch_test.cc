// cascade-mpi under mpirun (label "mpi"): one machine as two pretend nodes of two ranks,
// each node one tensor-parallel stage (TP 2), the pipeline across them on the MPI data
// plane, rank 0 serving the public APIs. Greedy ids equal the single process's and the
// logprobs match it within 1e-4 (F32 activations); a killed or a stopped rank ends the job
// within 10 s with every other rank naming it and a non-zero exit; SIGUSR1 drains it and
// every rank exits 0.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cascade/v1/inference.grpc.pb.h"
#include "engine/stage.h"
#include "engine/stage_test_util.h"
#include "engine/testdata/script_models.h"
#include "generation/sampler.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "model/test_util.h"
#include "tests/subprocess.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// A cascade-mpi job: mpirun -np N cascade-mpi ... with its output in a log.
class MpiJob {
 public:
  MpiJob(int np, const std::string& model, const std::vector<std::string>& flags) {
    dir_ = ::testing::TempDir() + "/mpi_job_" + std::to_string(::getpid()) + "_" +
           std::to_string(counter_++);
    std::system(("rm -rf " + dir_ + " && mkdir -p " + dir_).c_str());
    // Loopback only: test machines carry bridges and namespaces of other tests, whose
    // addresses Open MPI would otherwise try. Every port is 0, picked by the job and read
    // back (WaitServing): a port picked here and bound later could be taken in between,
    // by this job's own MPI sockets among others.
    // clang-format off
    std::vector<std::string> args = {CASCADE_MPIEXEC, "--oversubscribe", "--allow-run-as-root",
                                     "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include",
                                     "lo", "--mca", "oob_tcp_if_include", "lo",
                                     "-np", std::to_string(np),
                                     CASCADE_MPI_BIN, "--model", model,
                                     "--listen", "127.0.0.1:0",
                                     "--control-listen", "127.0.0.1:0",
                                     "--http-listen", "127.0.0.1:0",
                                     "--address-file", dir_ + "/address",
                                     "--quantized-activations", "false", "--threads", "1",
                                     "--log-level", "info"};
    // clang-format on
    args.insert(args.end(), flags.begin(), flags.end());
    proc_ = testing::Subprocess::Start(args, dir_ + "/job.log");
  }
  ~MpiJob() {
    if (proc_ && proc_->pid() > 0) {
      proc_->Signal(SIGTERM);  // mpirun ends its ranks
      if (proc_->WaitExit(std::chrono::seconds(15)) == -1) {
        ::kill(-proc_->pid(), SIGKILL);
        proc_->WaitExit(std::chrono::seconds(5));
      }
    }
  }

  // Waits until rank 0 says where it serves (the address file, and "HTTP on port N" in its
  // log line), or the job ends.
  bool WaitServing(std::chrono::seconds timeout = std::chrono::seconds(180)) {
    const auto deadline = Clock::now() + timeout;
    const std::regex http(R"(HTTP on port ([0-9]+))");
    while (Clock::now() < deadline) {
      std::ifstream in(dir_ + "/address");
      std::string a;
      std::smatch m;
      const std::string log = Log();
      if (in >> a && std::regex_search(log, m, http)) {
        address_ = a;
        http_port_ = std::stoi(m[1]);
        return true;
      }
      if (!proc_->Running()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  const std::string& address() const { return address_; }
  int http_port() const { return http_port_; }
  std::string Log() const { return proc_->Log(); }
  testing::Subprocess& process() { return *proc_; }

  // The pid rank 0 logged for `rank` ("rank R: pid P on ...").
  int RankPid(int rank) const {
    const std::regex re(absl::StrCat("rank ", rank, ": pid ([0-9]+) on"));
    std::smatch m;
    const std::string log = Log();
    return std::regex_search(log, m, re) ? std::stoi(m[1]) : -1;
  }

 private:
  static inline int counter_ = 0;
  std::string dir_, address_;
  int http_port_ = 0;
  std::unique_ptr<testing::Subprocess> proc_;
};

struct Expected {
  std::vector<int32_t> ids;  // generated only
  std::vector<float> logprobs;
  int32_t cached_tokens = 0;  // the server's usage: prompt tokens from its prefix cache
};

// Greedy decoding by one unsplit stage in this process (F32 activations).
Expected LocalGreedy(const std::string& model, const std::vector<int32_t>& prompt, int n) {
  Expected e;
  auto src = ModelSource::Open(model);
  EXPECT_TRUE(src.ok());
  StageOptions o;
  o.quantized_activations = false;
  auto stage = Stage::Create(**src, o);
  EXPECT_TRUE(stage.ok());
  if (!src.ok() || !stage.ok()) return e;
  const int64_t V = (*src)->config().vocab_size;
  std::vector<int32_t> history = prompt;
  Batch batch;
  for (size_t i = 0; i < prompt.size(); ++i) {
    batch.push_back({prompt[i], 0, static_cast<int32_t>(i), i + 1 == prompt.size()});
  }
  std::vector<float> logits;
  for (int t = 0; t < n; ++t) {
    EXPECT_TRUE((*stage)->Forward(batch, {}, &logits).ok());
    const SampleResult s = Sample(std::span<const float>(logits.data(), V), SamplingParams::Greedy(),
                                  {}, history.size(), true);
    e.ids.push_back(s.token);
    e.logprobs.push_back(s.logprob);
    history.push_back(s.token);
    batch = {{s.token, 0, static_cast<int32_t>(history.size() - 1), true}};
  }
  return e;
}

Expected RemoteGreedy(const std::string& address, const std::vector<int32_t>& prompt, int n) {
  Expected e;
  auto stub = v1::Inference::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  v1::GenerateRequest req;
  for (int32_t id : prompt) req.add_prompt_ids(id);
  req.set_max_tokens(n);
  req.set_ignore_eos(true);
  req.set_logprobs(true);
  req.mutable_sampling()->set_temperature(0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse r;
  while (reader->Read(&r)) {
    e.ids.insert(e.ids.end(), r.token_ids().begin(), r.token_ids().end());
    e.logprobs.insert(e.logprobs.end(), r.logprobs().begin(), r.logprobs().end());
    if (r.has_usage()) e.cached_tokens = r.usage().cached_tokens();
  }
  grpc::Status st = reader->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  return e;
}

bool HealthServing(const std::string& address) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  return stub->Check(&ctx, req, &resp).ok() &&
         resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// A model of ../shared (paths relative to it), or one written from a formula
// (engine/testdata/script_models.h: `model` names it, `reference` is relative to the source
// tree, the prompt is the reference's first 10 ids; no text prompts: their vocabulary is
// the bundled tokenizer's over 128 ids).
struct ModelCase {
  std::string name, model, prompt, reference;  // reference: prompt + greedy ids
  int tokens;
  bool generated = false;
};

std::string SourcePath(const std::string& rel) { return std::string(CASCADE_SOURCE_DIR) + "/" + rel; }

std::string GeneratedModel(const std::string& which) {
  auto tok = GgufFile::Open(SourcePath("models/stories260K.gguf"));
  EXPECT_TRUE(tok.ok()) << tok.status();
  if (!tok.ok()) return "";
  if (which == "phi3_longrope") return testing::MiniPhi3LongRope(256, tok->get());
  if (which == "gemma3") return testing::MiniGemma3(tok->get());
  if (which == "qwen3moe") return testing::MiniQwen3Moe(tok->get());
  if (which == "mixtral") return testing::MiniMoeForTp("llama", tok->get());
  if (which == "qwen2moe") return testing::MiniMoeForTp("qwen2moe", tok->get());
  return testing::MiniMistralSwa(tok->get());
}

class TwoNodesOfTp2 : public ::testing::TestWithParam<ModelCase> {};

TEST_P(TwoNodesOfTp2, ServeTheSingleProcessGreedyText) {
  const ModelCase& c = GetParam();
  const std::string model = c.generated ? GeneratedModel(c.model) : testing::SharedPath(c.model);
  CASCADE_REQUIRE_SHARED(model);
  const std::string reference = c.reference.empty() ? ""
                                : c.generated      ? SourcePath(c.reference)
                                                   : testing::SharedPath(c.reference);
  // Generated models (a 128-id vocabulary) take the first 10 ids of their reference, or
  // these.
  std::vector<int32_t> prompt =
      !c.generated          ? testing::ReadIds(testing::SharedPath(c.prompt))
      : reference.empty() ? std::vector<int32_t>{1, 37, 59, 101, 12, 88, 64, 3, 117, 45}
                          : testing::ReadIds(reference);
  if (c.generated) prompt.resize(10);
  ASSERT_FALSE(prompt.empty());
  // An F32 KV cache, as the single process keeps: the logprobs are compared to 1e-4.
  MpiJob job(4, model, {"--ranks-per-node", "2", "--tp", "2", "--kv-type", "f32"});
  ASSERT_TRUE(job.WaitServing()) << job.Log();
  EXPECT_THAT(job.Log(), HasSubstr("2 nodes x 2 ranks; 2 stages of 2 ranks (tensor parallel)"));
  EXPECT_THAT(job.Log(), HasSubstr("workers send results to mpi://0"));
  EXPECT_TRUE(HealthServing(job.address()));

  const Expected want = LocalGreedy(model, prompt, c.tokens);
  const Expected got = RemoteGreedy(job.address(), prompt, c.tokens);
  EXPECT_EQ(got.ids, want.ids) << job.Log();
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  double worst = 0;
  for (size_t i = 0; i < got.logprobs.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(got.logprobs[i] - want.logprobs[i])));
  }
  EXPECT_LT(worst, 1e-4) << "max |logprob - single process|";
  RecordProperty("max_abs_logprob_diff", std::to_string(worst));
  // A next turn (the prompt, the answer, more): its first block comes from the prefix
  // cache of both tensor-parallel stages, and the text is still the single process's.
  std::vector<int32_t> next = prompt;
  next.insert(next.end(), got.ids.begin(), got.ids.end());
  next.insert(next.end(), prompt.begin(), prompt.begin() + 3);
  const Expected want_next = LocalGreedy(model, next, 8);
  const Expected got_next = RemoteGreedy(job.address(), next, 8);
  EXPECT_EQ(got_next.ids, want_next.ids) << job.Log();
  EXPECT_EQ(got_next.cached_tokens,
            static_cast<int32_t>(prompt.size() + got.ids.size() - 1) / kDefaultKvBlockSize *
                kDefaultKvBlockSize);
  for (size_t i = 0; i < got_next.logprobs.size() && i < want_next.logprobs.size(); ++i) {
    EXPECT_NEAR(got_next.logprobs[i], want_next.logprobs[i], 1e-4) << "token " << i;
  }
  if (reference.empty()) return;  // compared with the single process only
  // And the independent reference's greedy ids (prompt + generated).
  const std::vector<int32_t> ref = testing::ReadIds(reference);
  ASSERT_GE(ref.size(), prompt.size() + got.ids.size());
  EXPECT_EQ(got.ids, std::vector<int32_t>(ref.begin() + prompt.size(),
                                          ref.begin() + prompt.size() + got.ids.size()));

  if (c.generated) return;  // no text prompts (above)
  // The OpenAI HTTP API on rank 0, as cascade-coordinator serves it.
  httplib::Client http("127.0.0.1", job.http_port());
  http.set_read_timeout(60, 0);
  auto r = http.Post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 8})",
                     "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_THAT(r->body, HasSubstr("\"choices\""));
}

INSTANTIATE_TEST_SUITE_P(
    Models, TwoNodesOfTp2,
    ::testing::Values(ModelCase{"stories260K", "models/stories260K/stories260K.gguf",
                                "models/stories260K/prompt.ids",
                                "models/stories260K/prompt-greedy.ids", 48},
                      ModelCase{"tinyllama_f16", "models/tiny-llama/tiny-llama-f16.gguf",
                                "models/tiny-llama/prompt.ids",
                                "models/tiny-llama/f16.greedy32.ids", 32},
                      // The architectures beyond Llama whose head counts 2 divides (Phi-3's
                      // mini model has 3 heads): each rank holds half of every layer's
                      // heads, q/k norms (qwen3), soft-caps, post-norms and the even
                      // layers' window (gemma2, 13 layers a node).
                      ModelCase{"qwen3", "models/arch/mini-qwen3-f32.gguf",
                                "models/arch/prompt.ids",
                                "models/arch/mini-qwen3-f32.greedy32.ids", 32},
                      ModelCase{"gemma2", "models/arch/mini-gemma2-f32.gguf",
                                "models/arch/prompt.ids",
                                "models/arch/mini-gemma2-f32.greedy32.ids", 32},
                      // Written here, with their NumPy references: LongRoPE with partial
                      // rotary, Gemma 3's local and global layers, Mistral's window.
                      ModelCase{"phi3_longrope", "phi3_longrope", "",
                                "engine/testdata/phi3longrope/mini-phi3-long.ids", 14, true},
                      ModelCase{"gemma3", "gemma3", "", "engine/testdata/gemma3/mini-gemma3.ids",
                                14, true},
                      ModelCase{"mistral_swa", "mistral_swa", "",
                                "engine/testdata/mistralswa/mini-mistral-swa.ids", 14, true},
                      // Experts split over each node's two ranks (expert parallelism).
                      ModelCase{"qwen3moe", "qwen3moe", "",
                                "engine/testdata/qwen3moe/mini-qwen3moe.ids", 14, true},
                      // Mixtral's and Qwen2-MoE's layouts with 4 heads (../shared's minis
                      // have 3), against the single process.
                      ModelCase{"mixtral", "mixtral", "", "", 24, true},
                      ModelCase{"qwen2moe", "qwen2moe", "", "", 24, true}),
    [](const ::testing::TestParamInfo<ModelCase>& i) { return i.param.name; });

// A rank that dies: every other rank gone within 10 s, naming it; the job fails.
TEST(MpiLostRank, AKilledRankEndsTheJobWithEveryRankNamingIt) {
  const std::string model = testing::SharedPath("models/stories260K/stories260K.gguf");
  CASCADE_REQUIRE_SHARED(model);
  MpiJob job(4, model, {"--ranks-per-node", "2", "--tp", "2"});
  ASSERT_TRUE(job.WaitServing()) << job.Log();
  const int pid = job.RankPid(2);
  ASSERT_GT(pid, 0) << job.Log();
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  const int status = job.process().WaitExit(std::chrono::seconds(10));
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_NE(status, -1) << "the job still runs 10 s after rank 2 was killed\n" << job.Log();
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << job.Log();
  const std::string log = job.Log();
  // Ranks 0, 1 and 3 each name it.
  for (int r : {0, 1, 3}) {
    EXPECT_THAT(log, HasSubstr(absl::StrCat("cascade-mpi rank ", r, ": lost rank 2 (pid ", pid)))
        << log;
  }
  RecordProperty("seconds_to_end", std::to_string(took));
}

// A rank that stops answering (SIGSTOP): found by its missing heartbeats.
TEST(MpiLostRank, AStoppedRankEndsTheJobWithEveryRankNamingIt) {
  const std::string model = testing::SharedPath("models/stories260K/stories260K.gguf");
  CASCADE_REQUIRE_SHARED(model);
  MpiJob job(4, model, {"--ranks-per-node", "2", "--tp", "2"});
  ASSERT_TRUE(job.WaitServing()) << job.Log();
  const int pid = job.RankPid(3);
  ASSERT_GT(pid, 0);
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  const int status = job.process().WaitExit(std::chrono::seconds(10));
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  if (status == -1) ::kill(pid, SIGKILL);  // let the cleanup end it
  ASSERT_NE(status, -1) << "the job still runs 10 s after rank 3 stopped\n" << job.Log();
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const std::string log = job.Log();
  for (int r : {0, 1, 2}) {
    EXPECT_THAT(log, HasSubstr(absl::StrCat("cascade-mpi rank ", r, ": lost rank 3 (pid ", pid)))
        << log;
  }
  EXPECT_THAT(log, HasSubstr("no heartbeat"));
  RecordProperty("seconds_to_end", std::to_string(took));
}

// SIGUSR1 to mpirun (forwarded to every rank) drains the cluster; every rank exits 0.
// --replicas 2 under mpirun: two single-rank pipelines, requests spread over both
// (round-robin), each the single process's greedy text.
TEST(MpiReplicas, TwoPipelinesOfOneRankEachServeTheSingleProcessText) {
  const std::string model = testing::SharedPath("models/stories260K/stories260K.gguf");
  CASCADE_REQUIRE_SHARED(model);
  MpiJob job(2, model, {"--ranks-per-node", "1", "--replicas", "2", "--routing", "round-robin",
                        "--kv-type", "f32"});
  ASSERT_TRUE(job.WaitServing()) << job.Log();
  // Serving begins with the first replica; round-robin needs both.
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Count(job.Log(), "serving") < 2 ||
         job.Log().find("replica 1: serving") == std::string::npos ||
         job.Log().find("replica 0: serving") == std::string::npos) {
    ASSERT_LT(Clock::now(), deadline) << job.Log();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Three prompts twice, in turn: each prompt once on each replica.
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 403, 407, 261, 378}, {1, 320, 289, 470}, {1, 275, 301, 280, 266}};
  for (int round = 0; round < 2; ++round) {
    for (const std::vector<int32_t>& p : prompts) {
      EXPECT_EQ(RemoteGreedy(job.address(), p, 12).ids, LocalGreedy(model, p, 12).ids)
          << job.Log();
    }
  }
}

// Speculative decoding under mpirun with TP 2 (2 nodes x 2 ranks): the drafted tokens are
// sampled by both ranks' last stage, and the greedy text is the single process's.
// With --speculative draft the draft model runs on rank 0, beside the scheduler.
class MpiSpeculative : public ::testing::TestWithParam<const char*> {};

TEST_P(MpiSpeculative, TwoNodesOfTp2GiveTheSingleProcessGreedyText) {
  const std::string model = testing::SharedPath("models/stories260K/stories260K.gguf");
  CASCADE_REQUIRE_SHARED(model);
  std::vector<std::string> flags = {"--ranks-per-node", "2", "--tp", "2", "--kv-type", "f32",
                                    "--speculative", GetParam()};
  if (std::string(GetParam()) == "draft") flags.insert(flags.end(), {"--draft-model", model});
  MpiJob job(4, model, flags);
  ASSERT_TRUE(job.WaitServing()) << job.Log();
  // Text that repeats, so that the drafts are often right.
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 403, 407, 261, 378, 403, 407};
  const Expected want = LocalGreedy(model, prompt, 24);
  const Expected got = RemoteGreedy(job.address(), prompt, 24);
  EXPECT_EQ(got.ids, want.ids) << job.Log();
  if (std::string(GetParam()) == "draft") {
    EXPECT_THAT(job.Log(), ::testing::HasSubstr("draft model " + model)) << job.Log();
  }
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
  for (size_t i = 0; i < got.logprobs.size(); ++i) {
    EXPECT_NEAR(got.logprobs[i], want.logprobs[i], 1e-4) << "token " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Drafts, MpiSpeculative, ::testing::Values("ngram", "draft"));

TEST(MpiJobEnd, SigUsr1DrainsAndTheJobExitsZero) {
  const std::string model = testing::SharedPath("models/stories260K/stories260K.gguf");
  CASCADE_REQUIRE_SHARED(model);
  MpiJob job(4, model, {"--ranks-per-node", "2", "--tp", "2"});
  ASSERT_TRUE(job.WaitServing()) << job.Log();
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  EXPECT_EQ(RemoteGreedy(job.address(), prompt, 4).ids.size(), 4u);
  job.process().Signal(SIGUSR1);
  const int status = job.process().WaitExit(std::chrono::seconds(60));
  ASSERT_NE(status, -1) << job.Log();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << job.Log();
  EXPECT_EQ(Count(job.Log(), "] stopped"), 4) << job.Log();  // "... I [rank N] stopped"
}

}  // namespace
}  // namespace cascade
