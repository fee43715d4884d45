#include "serving/openai_request.h"

#include "gtest/gtest.h"

namespace cascade {
namespace {

constexpr auto kCompl = OpenAiEndpoint::kCompletions;
constexpr auto kChat = OpenAiEndpoint::kChat;

// The argument an invalid body is refused for.
std::string RefusedParam(const std::string& body, OpenAiEndpoint e) {
  auto r = ParseOpenAiRequest(body, e);
  if (r.ok()) return "<accepted>";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  return ErrorParam(r.status());
}

TEST(OpenAiRequest, CompletionDefaultsAndFields) {
  auto r = ParseOpenAiRequest(
      R"({"model":"m","prompt":"Hi","max_tokens":7,"temperature":0,"top_p":0.5,"seed":42,
          "stop":["x","y"],"logprobs":3,"n":2,"best_of":2,"logit_bias":{"5":-100,"7":2.5},
          "stream":true,"stream_options":{"include_usage":true},"user":"u","top_k":-1})",
      kCompl);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->spec.model, "m");
  EXPECT_EQ(r->spec.max_tokens, 7);
  EXPECT_EQ(r->spec.sampling.temperature, 0.0f);
  EXPECT_EQ(r->spec.sampling.top_p, 0.5f);
  EXPECT_EQ(r->spec.sampling.top_k, 0);
  EXPECT_TRUE(r->spec.seed.has_value());
  EXPECT_EQ(r->spec.seed.value_or(0), 42u);
  EXPECT_EQ(r->spec.stop.size(), 2u);
  EXPECT_TRUE(r->spec.logprobs);
  EXPECT_EQ(r->spec.top_logprobs, 3);
  EXPECT_EQ(r->spec.n, 2);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  ASSERT_EQ(r->spec.prompts.size(), 1u);
  EXPECT_EQ(r->spec.prompts[0].text, "Hi");
  EXPECT_EQ(r->spec.sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{5, -100.0f}, {7, 2.5f}}));

  auto d = ParseOpenAiRequest(R"({"prompt":"Hi"})", kCompl);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->spec.max_tokens, 16);  // OpenAI's default for completions
  EXPECT_EQ(d->spec.sampling.temperature, 1.0f);
  EXPECT_FALSE(d->spec.seed.has_value());
  EXPECT_FALSE(d->spec.logprobs);
  auto c = ParseOpenAiRequest(R"({"messages":[{"role":"user","content":"Hi"}]})", kChat);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->spec.max_tokens, 0);  // chat: up to the context
  // Speculative decoding, per request (an extension): on unless the request opts out.
  EXPECT_TRUE(d->spec.speculate);
  auto off = ParseOpenAiRequest(R"({"prompt":"Hi","speculative":false})", kCompl);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->spec.speculate);
  EXPECT_EQ(RefusedParam(R"({"prompt":"Hi","speculative":"no"})", kCompl), "speculative");
}

TEST(OpenAiRequest, PromptShapes) {
  auto list = ParseOpenAiRequest(R"({"prompt":["a","b",[1,2,3]]})", kCompl);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->spec.prompts.size(), 3u);
  EXPECT_EQ(list->spec.prompts[1].text, "b");
  EXPECT_EQ(list->spec.prompts[2].ids, (std::vector<int32_t>{1, 2, 3}));
  auto ids = ParseOpenAiRequest(R"({"prompt":[4,5]})", kCompl);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->spec.prompts[0].ids, (std::vector<int32_t>{4, 5}));
  for (const char* bad : {R"({"prompt":[]})", R"({"prompt":[1,"a"]})", R"({"prompt":[-1]})",
                          R"({"prompt":""})", R"({"prompt":{}})", R"({})", R"({"prompt":[[]]})"}) {
    EXPECT_EQ(RefusedParam(bad, kCompl), "prompt") << bad;
  }
  EXPECT_EQ(RefusedParam(R"({"prompt":["a","b","c","d","e"],"n":4})", kCompl), "prompt");
}

TEST(OpenAiRequest, ChatMessages) {
  auto r = ParseOpenAiRequest(
      R"({"messages":[{"role":"developer","content":"Be brief."},
                      {"role":"user","content":[{"type":"text","text":"Hi "},{"type":"text","text":"there"}]},
                      {"role":"assistant","content":null,"tool_calls":[]}],
          "logprobs":true,"top_logprobs":2,"max_completion_tokens":9,
          "response_format":{"type":"text"},"tools":[],"tool_choice":"none"})",
      kChat);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[1].content, "Hi there");
  EXPECT_EQ(r->spec.top_logprobs, 2);
  EXPECT_EQ(r->spec.max_tokens, 9);
  EXPECT_EQ(RefusedParam(R"({"messages":[{"role":"tool","content":"x"}]})", kChat),
            "messages[0].role");
  EXPECT_EQ(RefusedParam(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
                         kChat),
            "messages[0].content[0].type");
  EXPECT_EQ(RefusedParam(R"({"messages":[{"role":"user"}]})", kChat), "messages[0].content");
  EXPECT_EQ(RefusedParam(R"({"messages":[]})", kChat), "messages");
  EXPECT_EQ(RefusedParam(R"({"messages":[{"role":"user","content":"x","extra":1}]})", kChat),
            "messages[0].extra");
}

// What Cascade cannot honour is refused by name, never ignored.
TEST(OpenAiRequest, UnsupportedArgumentsAreRefusedByName) {
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  struct Case {
    std::string body;
    OpenAiEndpoint e;
    std::string param;
  };
  for (const Case& c : std::vector<Case>{
           {"{" + m + R"(,"tools":[{"type":"function","function":{"name":"f"}}]})", kChat, "tools"},
           {"{" + m + R"(,"response_format":{"type":"json_object"}})", kChat, "response_format"},
           {"{" + m + R"(,"tool_choice":"auto"})", kChat, "tool_choice"},
           {"{" + m + R"(,"top_logprobs":3})", kChat, "top_logprobs"},  // without logprobs
           {"{" + m + R"(,"top_logprobs":21,"logprobs":true})", kChat, "top_logprobs"},
           {"{" + m + R"(,"store":true})", kChat, "store"},
           {"{" + m + R"(,"audio":{}})", kChat, "audio"},
           {"{" + m + R"(,"reasoning_effort":"high"})", kChat, "reasoning_effort"},
           {"{" + m + R"(,"echo":true})", kChat, "echo"},
           {R"({"prompt":"x","suffix":"y"})", kCompl, "suffix"},
           {R"({"prompt":"x","best_of":3})", kCompl, "best_of"},
           {R"({"prompt":"x","echo":true,"logprobs":1})", kCompl, "echo"},
           {R"({"prompt":"x","logprobs":6})", kCompl, "logprobs"},
           {R"({"prompt":"x","n":0})", kCompl, "n"},
           {R"({"prompt":"x","n":17})", kCompl, "n"},
           {R"({"prompt":"x","temperature":2.5})", kCompl, "temperature"},
           {R"({"prompt":"x","temperature":"hot"})", kCompl, "temperature"},
           {R"({"prompt":"x","top_p":0})", kCompl, "top_p"},
           {R"({"prompt":"x","max_tokens":0})", kCompl, "max_tokens"},
           {R"({"prompt":"x","max_tokens":1.5})", kCompl, "max_tokens"},
           {R"({"prompt":"x","logit_bias":{"a":1}})", kCompl, "logit_bias"},
           {R"({"prompt":"x","logit_bias":{"3":101}})", kCompl, "logit_bias"},
           {R"({"prompt":"x","stop":[1]})", kCompl, "stop"},
           {R"({"prompt":"x","stop":[""]})", kCompl, "stop"},
           {R"({"prompt":"x","stream_options":{"include_usage":true}})", kCompl, "stream_options"},
           {R"({"prompt":"x","stream":true,"stream_options":{"foo":1}})", kCompl,
            "stream_options.foo"},
           {R"({"prompt":"x","seed":"s"})", kCompl, "seed"},
           {R"({"prompt":"x","frobnicate":1})", kCompl, "frobnicate"},
       }) {
    EXPECT_EQ(RefusedParam(c.body, c.e), c.param) << c.body;
  }
}

TEST(OpenAiRequest, NonJsonBodiesAreRefusedWithoutParam) {
  for (const std::string body : {"", "null", "[1]", "{", "{\"prompt\":\"\xff\"}", "\"x\""}) {
    auto r = ParseOpenAiRequest(body, kCompl);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ErrorParam(r.status()), "");
  }
}

}  // namespace
}  // namespace cascade
