#include "serving/generate_spec.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model_source.h"
#include "model/test_models.h"
#include "model/tokenizer.h"
#include "serving/openai_request.h"
#include "serving/proto_request.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

class GenerateSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto src = ModelSource::Open(testing::BundledModel());
    ASSERT_TRUE(src.ok()) << src.status();
    source_ = std::move(*src);
    auto tok = Tokenizer::FromSource(*source_);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tokenizer_ = std::move(*tok);
  }
  std::unique_ptr<ModelSource> source_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

void ExpectSameSampling(const SamplingParams& a, const SamplingParams& b) {
  EXPECT_EQ(a.temperature, b.temperature);
  EXPECT_EQ(a.top_k, b.top_k);
  EXPECT_EQ(a.top_p, b.top_p);
  EXPECT_EQ(a.min_p, b.min_p);
  EXPECT_EQ(a.repetition_penalty, b.repetition_penalty);
  EXPECT_EQ(a.frequency_penalty, b.frequency_penalty);
  EXPECT_EQ(a.presence_penalty, b.presence_penalty);
  EXPECT_EQ(a.penalty_last_n, b.penalty_last_n);
  EXPECT_EQ(a.logit_bias, b.logit_bias);
}

// inference.proto: an absent `sampling` means what an empty one does (greedy, nothing
// filtered, the server's seed), whatever else the request says.
TEST_F(GenerateSpecTest, AbsentAndEmptySamplingMeanTheSame) {
  v1::GenerateRequest absent;
  absent.set_prompt("Once upon a time");
  absent.set_max_tokens(8);
  v1::GenerateRequest empty = absent;
  empty.mutable_sampling();
  ASSERT_FALSE(absent.has_sampling());
  ASSERT_TRUE(empty.has_sampling());
  auto pa = SpecFromProto(absent), pe = SpecFromProto(empty);
  ASSERT_TRUE(pa.ok() && pe.ok());
  const GenerateSpec& a = *pa;
  const GenerateSpec& e = *pe;
  ExpectSameSampling(a.sampling, e.sampling);
  EXPECT_TRUE(a.sampling.greedy());
  EXPECT_EQ(a.sampling.top_p, 1.0f);
  EXPECT_EQ(a.sampling.repetition_penalty, 1.0f);
  EXPECT_FALSE(a.seed.has_value());
  EXPECT_FALSE(e.seed.has_value());
  EXPECT_TRUE(a.sampling.Validate().ok());
}

// The proto's zeros mean "off"; every other value passes as given, and a spec written
// to the proto (what `cascade generate --server` sends) reads back as the same spec.
TEST_F(GenerateSpecTest, ProtoRoundTripKeepsEverySetting) {
  GenerateSpec spec;
  spec.prompts.push_back({"Once upon a time", {}});
  spec.sampling.temperature = 0.7f;
  spec.sampling.top_k = 40;
  spec.sampling.top_p = 0.9f;
  spec.sampling.min_p = 0.05f;
  spec.sampling.repetition_penalty = 1.3f;
  spec.sampling.frequency_penalty = 0.5f;
  spec.sampling.presence_penalty = -0.25f;
  spec.sampling.logit_bias = {{3, -100.0f}, {17, 4.0f}};
  spec.seed = 99;
  spec.max_tokens = 12;
  spec.stop = {"Lily", "."};
  spec.logprobs = true;
  spec.top_logprobs = 3;
  v1::GenerateRequest wire;
  SpecToProto(spec, &wire);
  auto parsed = SpecFromProto(wire);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const GenerateSpec& back = *parsed;
  ExpectSameSampling(back.sampling, spec.sampling);
  EXPECT_EQ(back.seed, spec.seed);
  EXPECT_EQ(back.max_tokens, 12);
  EXPECT_EQ(back.stop, spec.stop);
  EXPECT_TRUE(back.logprobs);
  EXPECT_EQ(back.top_logprobs, 3);
  ASSERT_EQ(back.prompts.size(), 1u);
  EXPECT_EQ(back.prompts[0].text, "Once upon a time");
}

// The OpenAI API and the proto give the same spec for the same settings, and an OpenAI
// request that names no sampling setting gets SamplingParams{}: the one set of defaults.
TEST_F(GenerateSpecTest, OpenAiAndProtoAgreeAndDefaultsAreWrittenOnce) {
  auto bare = ParseOpenAiRequest(R"({"prompt": "Once"})", OpenAiEndpoint::kCompletions);
  ASSERT_TRUE(bare.ok()) << bare.status();
  ExpectSameSampling(bare->spec.sampling, SamplingParams{});
  EXPECT_EQ(bare->spec.max_tokens, kCompletionsDefaultMaxTokens);
  auto chat = ParseOpenAiRequest(R"({"messages": [{"role": "user", "content": "Hi"}]})",
                                 OpenAiEndpoint::kChat);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->spec.max_tokens, 0);  // to the context

  auto http = ParseOpenAiRequest(
      R"({"prompt": "Once", "temperature": 0.7, "top_k": 40, "top_p": 0.9, "min_p": 0.05,
          "repetition_penalty": 1.3, "frequency_penalty": 0.5, "presence_penalty": -0.25,
          "logit_bias": {"17": 4, "3": -100}, "seed": 99, "max_tokens": 12})",
      OpenAiEndpoint::kCompletions);
  ASSERT_TRUE(http.ok()) << http.status();
  v1::GenerateRequest g;
  g.set_prompt("Once");
  g.set_max_tokens(12);
  v1::SamplingParams* s = g.mutable_sampling();
  s->set_temperature(0.7f);
  s->set_top_k(40);
  s->set_top_p(0.9f);
  s->set_min_p(0.05f);
  s->set_repetition_penalty(1.3f);
  s->set_frequency_penalty(0.5f);
  s->set_presence_penalty(-0.25f);
  (*s->mutable_logit_bias())[3] = -100;
  (*s->mutable_logit_bias())[17] = 4;
  s->set_seed(99);
  s->set_has_seed(true);
  auto parsed = SpecFromProto(g);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const GenerateSpec& proto = *parsed;
  ExpectSameSampling(http->spec.sampling, proto.sampling);
  EXPECT_EQ(http->spec.seed, proto.seed);
  EXPECT_EQ(http->spec.max_tokens, proto.max_tokens);
}

// Choice k of prompt p draws from seed + p * n + k; the prompts are tokenized as the model
// asks (BOS first); the echo is the prompt's text.
TEST_F(GenerateSpecTest, ExpandGivesOneRequestPerChoiceWithItsSeed) {
  GenerateSpec spec;
  spec.prompts = {{"Once upon a time", {}}, {"", {1, 403, 407}}};
  spec.n = 3;
  spec.seed = 1000;
  spec.echo = true;
  spec.top_logprobs = 2;
  spec.speculate = false;
  auto out = ExpandSpec(spec, *tokenizer_);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 6u);
  for (size_t i = 0; i < out->size(); ++i) {
    const ChoiceRequest& c = (*out)[i];
    EXPECT_FALSE(c.request.speculate);  // the request's opt-out reaches every choice
    EXPECT_EQ(c.prompt_index, static_cast<int>(i / 3));
    EXPECT_EQ(c.choice, static_cast<int>(i % 3));
    EXPECT_EQ(c.request.sampling.seed, 1000 + i);
    EXPECT_TRUE(c.request.logprobs);  // top_logprobs implies them
  }
  const auto want = tokenizer_->Encode("Once upon a time", true, true);
  ASSERT_TRUE(want.ok());
  EXPECT_EQ((*out)[0].request.prompt, *want);
  EXPECT_EQ((*out)[0].request.prompt.front(), 1);  // BOS
  EXPECT_EQ((*out)[0].echo, "Once upon a time");
  EXPECT_EQ((*out)[3].request.prompt, (std::vector<int32_t>{1, 403, 407}));
  EXPECT_EQ((*out)[3].echo, tokenizer_->Decode(std::vector<int32_t>{1, 403, 407}));
}

TEST_F(GenerateSpecTest, AResumedRequestNeedsItsSeedOnePromptAndOneChoice) {
  GenerateSpec spec;
  spec.prompts.push_back({"Once upon a time", {}});
  spec.sampling.temperature = 0.7f;
  spec.resume_after_tokens = 5;
  auto no_seed = ExpandSpec(spec, *tokenizer_);
  ASSERT_FALSE(no_seed.ok());
  EXPECT_NE(no_seed.status().message().find("seed"), std::string::npos) << no_seed.status();
  spec.seed = 42;
  auto ok = ExpandSpec(spec, *tokenizer_);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->front().request.resume_after, 5);
  EXPECT_EQ(ok->front().request.sampling.seed, 42u);
  GenerateSpec greedy = spec;  // greedy text needs no seed
  greedy.seed.reset();
  greedy.sampling.temperature = 0;
  EXPECT_TRUE(ExpandSpec(greedy, *tokenizer_).ok());
  GenerateSpec two = spec;
  two.n = 2;
  EXPECT_EQ(ExpandSpec(two, *tokenizer_).status().code(), absl::StatusCode::kInvalidArgument);
  GenerateSpec negative = spec;
  negative.resume_after_tokens = -1;
  EXPECT_EQ(ExpandSpec(negative, *tokenizer_).status().code(), absl::StatusCode::kInvalidArgument);
  // Both APIs carry it.
  v1::GenerateRequest proto;
  SpecToProto(spec, &proto);
  EXPECT_EQ(proto.resume_after_tokens(), 5);
  auto back = SpecFromProto(proto);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->resume_after_tokens, 5);
  auto http = ParseOpenAiRequest(
      R"({"prompt":"Hi","seed":3,"temperature":0.5,"resume_after_tokens":7})",
      OpenAiEndpoint::kCompletions);
  ASSERT_TRUE(http.ok()) << http.status();
  EXPECT_EQ(http->spec.resume_after_tokens, 7);
  EXPECT_FALSE(ParseOpenAiRequest(R"({"prompt":"Hi","resume_after_tokens":-2})",
                                  OpenAiEndpoint::kCompletions)
                   .ok());
}

TEST_F(GenerateSpecTest, ExpandRefusesBadPromptsAndCounts) {
  GenerateSpec spec;
  auto st = ExpandSpec(spec, *tokenizer_).status();
  EXPECT_THAT(std::string(st.message()), HasSubstr("prompt is empty"));
  spec.prompts = {{"text", {1, 2}}};
  st = ExpandSpec(spec, *tokenizer_).status();
  EXPECT_THAT(std::string(st.message()), HasSubstr("either text or ids"));
  // Empty text is BOS alone (the bundled model has one): generation from nothing.
  spec.prompts = {{"a", {}}, {"", {}}};
  auto bos = ExpandSpec(spec, *tokenizer_);
  ASSERT_TRUE(bos.ok()) << bos.status();
  EXPECT_EQ((*bos)[1].request.prompt, (std::vector<int32_t>{tokenizer_->bos_id()}));
  // The public proto names its own fields.
  v1::GenerateRequest none;
  EXPECT_THAT(std::string(SpecFromProto(none).status().message()),
              HasSubstr("give prompt or prompt_ids"));
  none.set_prompt("a");
  none.add_prompt_ids(1);
  EXPECT_THAT(std::string(SpecFromProto(none).status().message()), HasSubstr("not both"));
  spec.prompts = {{"a", {}}};
  spec.n = kMaxChoices + 1;
  st = ExpandSpec(spec, *tokenizer_).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("n ("));
}

}  // namespace
}  // namespace cascade
