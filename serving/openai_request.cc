#include "serving/openai_request.h"

#include <cmath>
#include <limits>
#include <map>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "generation/sampler.h"
#include "nlohmann/json.hpp"
#include "serving/sequence.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

using Json = nlohmann::json;
constexpr char kParamPayload[] = "cascade/openai-param";

// The arguments each endpoint takes. Anything else is refused by name.
const absl::flat_hash_set<std::string>& Known(OpenAiEndpoint e) {
  static const auto* completions = new absl::flat_hash_set<std::string>{
      "model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options",
      "logprobs", "echo", "stop", "presence_penalty", "frequency_penalty", "best_of",
      "logit_bias", "seed", "suffix", "user",
      // Cascade's (and vLLM's) extensions
      "top_k", "min_p", "repetition_penalty", "ignore_eos", "speculative",
      "resume_after_tokens"};
  static const auto* chat = new absl::flat_hash_set<std::string>{
      "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n",
      "stream", "stream_options", "stop", "presence_penalty", "frequency_penalty", "logit_bias",
      "logprobs", "top_logprobs", "seed", "user", "response_format", "tools", "tool_choice",
      "parallel_tool_calls", "functions", "function_call", "store", "metadata", "modalities",
      "service_tier",
      // extensions
      "top_k", "min_p", "repetition_penalty", "ignore_eos", "speculative",
      "resume_after_tokens"};
  return e == OpenAiEndpoint::kChat ? *chat : *completions;
}

class Parser {
 public:
  Parser(const Json& j, OpenAiEndpoint e) : j_(j), endpoint_(e) {}

  absl::StatusOr<OpenAiRequest> Run() {
    OpenAiRequest r;
    r.endpoint = endpoint_;
    for (const auto& [key, value] : j_.items()) {
      if (!Known(endpoint_).contains(key)) {
        return ParamError(key, absl::StrCat("Unrecognized request argument supplied: ", key));
      }
    }
    CASCADE_RETURN_IF_ERROR(Unsupported());
    GenerateSpec& g = r.spec;
    if (const Json* v = Get("model")) {
      if (!v->is_string()) return Want("model", "a string");
      g.model = v->get<std::string>();
    }
    CASCADE_RETURN_IF_ERROR(MaxTokens(&g));
    CASCADE_RETURN_IF_ERROR(Sampling(&g));
    CASCADE_RETURN_IF_ERROR(LogitBias(&g.sampling));
    CASCADE_RETURN_IF_ERROR(Stop(&g));
    if (const Json* v = Get("ignore_eos")) {
      if (!v->is_boolean()) return Want("ignore_eos", "a boolean");
      g.ignore_eos = v->get<bool>();
    }
    if (const Json* v = Get("speculative")) {  // false: this request decodes without drafts
      if (!v->is_boolean()) return Want("speculative", "a boolean");
      g.speculate = v->get<bool>();
    }
    if (const Json* v = Get("resume_after_tokens")) {  // a broken stream resumed (with "seed")
      if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > kMaxTokensLimit) {
        return Want("resume_after_tokens", "a non-negative integer");
      }
      g.resume_after_tokens = static_cast<int32_t>(v->get<int64_t>());
    }
    CASCADE_RETURN_IF_ERROR(Logprobs(&g));
    CASCADE_RETURN_IF_ERROR(Choices(&g));
    CASCADE_RETURN_IF_ERROR(Streaming(&r));
    if (const Json* v = Get("user")) {
      if (!v->is_string()) return Want("user", "a string");
    }
    if (endpoint_ == OpenAiEndpoint::kCompletions) {
      if (const Json* v = Get("echo")) {
        if (!v->is_boolean()) return Want("echo", "a boolean");
        g.echo = v->get<bool>();
        if (g.echo && g.logprobs) {
          return ParamError("echo", "'echo' with 'logprobs' (the prompt's logprobs) is not "
                                    "supported");
        }
      }
      CASCADE_RETURN_IF_ERROR(Prompts(&g));
    } else {
      CASCADE_RETURN_IF_ERROR(Messages(&r));
    }
    const int64_t choices =
        static_cast<int64_t>(g.n) * std::max<int64_t>(1, static_cast<int64_t>(g.prompts.size()));
    if (choices > kMaxChoices) {
      return ParamError(g.prompts.size() > 1 ? "prompt" : "n",
                        absl::StrCat(g.prompts.size(), " prompts x n = ", g.n, " is ", choices,
                                     " choices; at most ", kMaxChoices));
    }
    return r;
  }

 private:
  // Completions default to 16 tokens, as OpenAI's do; chat runs to the context.
  absl::Status MaxTokens(GenerateSpec* g) const {
    g->max_tokens = endpoint_ == OpenAiEndpoint::kCompletions ? kCompletionsDefaultMaxTokens : 0;
    for (const char* key : {"max_tokens", "max_completion_tokens"}) {
      if (endpoint_ == OpenAiEndpoint::kCompletions && std::string(key) != "max_tokens") continue;
      if (const Json* v = Get(key)) {
        int64_t n;
        if (!Int(*v, &n)) return Want(key, "an integer");
        if (n < 1 || n > kMaxTokensLimit) {
          return ParamError(key, absl::StrCat("'", key, "' must be in [1, ", kMaxTokensLimit, "]"));
        }
        g->max_tokens = static_cast<int32_t>(n);
      }
    }
    return absl::OkStatus();
  }

  // What is not given keeps SamplingParams{}'s value (OpenAI's own defaults).
  absl::Status Sampling(GenerateSpec* g) const {
    SamplingParams& s = g->sampling;
    struct Num {
      const char* key;
      double lo, hi;
      float SamplingParams::*field;
    };
    for (const Num& n : {Num{"temperature", 0, 2, &SamplingParams::temperature},
                         Num{"top_p", 0, 1, &SamplingParams::top_p},
                         Num{"min_p", 0, 1, &SamplingParams::min_p},
                         Num{"presence_penalty", -2, 2, &SamplingParams::presence_penalty},
                         Num{"frequency_penalty", -2, 2, &SamplingParams::frequency_penalty},
                         Num{"repetition_penalty", 0, 10, &SamplingParams::repetition_penalty}}) {
      const Json* v = Get(n.key);
      if (v == nullptr) continue;
      if (!v->is_number()) return Want(n.key, "a number");
      const double x = v->get<double>();
      if (!(x >= n.lo && x <= n.hi)) {
        return ParamError(n.key, absl::StrCat("'", n.key, "' must be in [", n.lo, ", ", n.hi, "]"));
      }
      s.*n.field = static_cast<float>(x);
    }
    if (s.top_p == 0.0f) return ParamError("top_p", "'top_p' must be in (0, 1]");
    // A repetition penalty of 0 has always meant none here (vLLM's extension takes 1).
    if (s.repetition_penalty == 0.0f) s.repetition_penalty = 1.0f;
    if (const Json* v = Get("top_k")) {
      int64_t k;
      if (!Int(*v, &k) || k < -1 || k > std::numeric_limits<int32_t>::max()) {
        return Want("top_k", "an integer >= -1 (-1 or 0: off)");
      }
      s.top_k = static_cast<int32_t>(std::max<int64_t>(0, k));
    }
    if (const Json* v = Get("seed")) {
      if (v->is_number_unsigned()) {
        g->seed = v->get<uint64_t>();
      } else if (v->is_number_integer()) {
        g->seed = static_cast<uint64_t>(v->get<int64_t>());
      } else {
        return Want("seed", "an integer");
      }
    }
    return absl::OkStatus();
  }

  absl::Status LogitBias(SamplingParams* s) const {
    const Json* v = Get("logit_bias");
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_object()) return Want("logit_bias", "an object of token ids to numbers");
    if (v->size() > kMaxLogitBias) {
      return ParamError("logit_bias",
                        absl::StrCat("'logit_bias' has more than ", kMaxLogitBias, " entries"));
    }
    std::map<int32_t, float> biases;  // sorted, each token once
    for (const auto& [key, bias] : v->items()) {
      int32_t id;
      if (!absl::SimpleAtoi(key, &id) || id < 0) {
        return ParamError("logit_bias",
                          absl::StrCat("'logit_bias' key '", key, "' is not a token id"));
      }
      if (!bias.is_number() || !(std::fabs(bias.get<double>()) <= 100)) {
        return ParamError("logit_bias",
                          absl::StrCat("'logit_bias' for token ", id, " must be in [-100, 100]"));
      }
      biases[id] = bias.get<float>();
    }
    s->logit_bias.assign(biases.begin(), biases.end());
    return absl::OkStatus();
  }

  absl::Status Stop(GenerateSpec* g) const {
    const Json* v = Get("stop");
    if (v == nullptr) return absl::OkStatus();
    if (v->is_string()) {
      g->stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const Json& x : *v) {
        if (!x.is_string()) return Want("stop", "a string or a list of strings");
        g->stop.push_back(x.get<std::string>());
      }
    } else {
      return Want("stop", "a string or a list of strings");
    }
    if (g->stop.size() > kMaxStopStrings) {
      return ParamError("stop", absl::StrCat("at most ", kMaxStopStrings, " stop strings"));
    }
    for (const std::string& stop : g->stop) {
      if (stop.empty() || stop.size() > kMaxStopBytes) {
        return ParamError("stop",
                          absl::StrCat("stop strings must have 1 to ", kMaxStopBytes, " bytes"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Choices(GenerateSpec* g) const {
    if (const Json* v = Get("n")) {
      int64_t n;
      if (!Int(*v, &n) || n < 1 || n > kMaxChoices) {
        return ParamError("n", absl::StrCat("'n' must be an integer in [1, ", kMaxChoices, "]"));
      }
      g->n = static_cast<int32_t>(n);
    }
    if (const Json* v = Get("best_of")) {
      int64_t b;
      if (!Int(*v, &b) || b != g->n) {
        return ParamError("best_of", "'best_of' is supported only equal to 'n' (no ranking of "
                                     "candidates by likelihood)");
      }
    }
    return absl::OkStatus();
  }

  absl::Status Streaming(OpenAiRequest* r) const {
    if (const Json* v = Get("stream")) {
      if (!v->is_boolean()) return Want("stream", "a boolean");
      r->stream = v->get<bool>();
    }
    if (const Json* v = Get("stream_options")) {
      if (!v->is_object()) return Want("stream_options", "an object");
      if (!r->stream) return ParamError("stream_options", "'stream_options' needs 'stream': true");
      for (const auto& [key, value] : v->items()) {
        if (key == "include_usage") {
          if (!value.is_boolean()) return Want("stream_options.include_usage", "a boolean");
          r->include_usage = value.get<bool>();
        } else if (key != "include_obfuscation" || !value.is_boolean()) {
          return ParamError(absl::StrCat("stream_options.", key),
                            absl::StrCat("Unrecognized stream option: ", key));
        }
      }
    }
    return absl::OkStatus();
  }

  const Json* Get(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  static bool Int(const Json& v, int64_t* out) {
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > std::numeric_limits<int64_t>::max()) {
        return false;
      }
      *out = v.get<int64_t>();
      return true;
    }
    if (v.is_number_float()) {  // 2.0 is 2, as JavaScript clients send it
      const double d = v.get<double>();
      if (d == std::floor(d) && std::fabs(d) < 9e15) {
        *out = static_cast<int64_t>(d);
        return true;
      }
    }
    return false;
  }
  static absl::Status Want(absl::string_view key, absl::string_view what) {
    return ParamError(key, absl::StrCat("'", key, "' must be ", what));
  }

  // Arguments Cascade knows and cannot honour (other than their neutral values).
  absl::Status Unsupported() const {
    if (const Json* v = Get("suffix"); v && !(v->is_string() && v->get<std::string>().empty())) {
      return ParamError("suffix", "'suffix' (insertion) is not supported");
    }
    if (const Json* v = Get("tools"); v && !(v->is_array() && v->empty())) {
      return ParamError("tools", "'tools' (function calling) is not supported");
    }
    if (const Json* v = Get("functions"); v && !(v->is_array() && v->empty())) {
      return ParamError("functions", "'functions' (function calling) is not supported");
    }
    for (const char* key : {"tool_choice", "function_call"}) {
      if (const Json* v = Get(key); v && !(v->is_string() && v->get<std::string>() == "none")) {
        return ParamError(key, absl::StrCat("'", key, "' other than \"none\" is not supported"));
      }
    }
    if (const Json* v = Get("parallel_tool_calls"); v && !v->is_boolean()) {
      return Want("parallel_tool_calls", "a boolean");
    }
    if (const Json* v = Get("response_format")) {
      if (!v->is_object() || !v->contains("type") || (*v)["type"] != "text") {
        return ParamError("response_format",
                          "'response_format' other than {\"type\": \"text\"} (JSON mode, JSON "
                          "schema) is not supported");
      }
    }
    if (const Json* v = Get("store"); v && !(v->is_boolean() && !v->get<bool>())) {
      return ParamError("store", "'store' (stored completions) is not supported");
    }
    if (const Json* v = Get("metadata"); v && !v->is_object()) {
      return Want("metadata", "an object");
    }
    if (const Json* v = Get("modalities")) {
      if (!v->is_array()) return Want("modalities", "a list");
      for (const Json& m : *v) {
        if (m != "text") return ParamError("modalities", "only the \"text\" modality is supported");
      }
    }
    if (const Json* v = Get("service_tier");
        v && !(v->is_string() && (*v == "auto" || *v == "default"))) {
      return ParamError("service_tier", "'service_tier' must be \"auto\" or \"default\"");
    }
    return absl::OkStatus();
  }

  absl::Status Logprobs(GenerateSpec* g) const {
    const Json* lp = Get("logprobs");
    if (endpoint_ == OpenAiEndpoint::kCompletions) {
      // An integer 0..5: the sampled token's logprob and that many alternatives.
      if (lp == nullptr) return absl::OkStatus();
      int64_t n;
      if (lp->is_boolean()) {
        n = lp->get<bool>() ? 0 : -1;
      } else if (!Int(*lp, &n) || n < 0 || n > kMaxCompletionLogprobs) {
        return ParamError("logprobs", absl::StrCat("'logprobs' must be an integer in [0, ",
                                                   kMaxCompletionLogprobs, "]"));
      }
      if (n >= 0) {
        g->logprobs = true;
        g->top_logprobs = static_cast<int32_t>(n);
      }
      return absl::OkStatus();
    }
    // Chat: logprobs is a boolean, top_logprobs 0..20 needs it.
    if (lp != nullptr) {
      if (!lp->is_boolean()) return Want("logprobs", "a boolean");
      g->logprobs = lp->get<bool>();
    }
    if (const Json* top = Get("top_logprobs")) {
      int64_t n;
      if (!Int(*top, &n) || n < 0 || n > kMaxTopLogprobs) {
        return ParamError("top_logprobs", absl::StrCat("'top_logprobs' must be an integer in [0, ",
                                                       kMaxTopLogprobs, "]"));
      }
      if (!g->logprobs) return ParamError("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      g->top_logprobs = static_cast<int32_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status Prompts(GenerateSpec* r) const {
    const Json* p = Get("prompt");
    if (p == nullptr) return ParamError("prompt", "'prompt' is required");
    auto ids = [](const Json& list, std::vector<int32_t>* out) {
      for (const Json& x : list) {
        int64_t id;
        if (!Int(x, &id) || id < 0 || id > std::numeric_limits<int32_t>::max()) return false;
        out->push_back(static_cast<int32_t>(id));
      }
      return !out->empty();
    };
    const char* kShape =
        "'prompt' must be a string, a list of strings, a list of token ids or a list of lists "
        "of token ids";
    if (p->is_string()) {
      r->prompts.push_back({p->get<std::string>(), {}});
    } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
      PromptInput one;
      if (!ids(*p, &one.ids)) return ParamError("prompt", kShape);
      r->prompts.push_back(std::move(one));
    } else if (p->is_array() && !p->empty()) {
      if (p->size() > static_cast<size_t>(kMaxChoices)) {
        return ParamError("prompt", absl::StrCat("at most ", kMaxChoices, " prompts"));
      }
      for (const Json& x : *p) {
        PromptInput one;
        if (x.is_string()) {
          one.text = x.get<std::string>();
        } else if (!x.is_array() || !ids(x, &one.ids)) {
          return ParamError("prompt", kShape);
        }
        r->prompts.push_back(std::move(one));
      }
    } else {
      return ParamError("prompt", kShape);
    }
    for (const auto& one : r->prompts) {
      if (one.ids.empty() && one.text.empty()) return ParamError("prompt", "a prompt is empty");
    }
    return absl::OkStatus();
  }

  absl::Status Messages(OpenAiRequest* r) const {
    const Json* m = Get("messages");
    if (m == nullptr || !m->is_array() || m->empty()) {
      return ParamError("messages", "'messages' must be a non-empty list");
    }
    for (size_t i = 0; i < m->size(); ++i) {
      const Json& msg = (*m)[i];
      const std::string at = absl::StrCat("messages[", i, "]");
      if (!msg.is_object()) return ParamError(at, absl::StrCat("'", at, "' must be an object"));
      for (const auto& [key, value] : msg.items()) {
        if (key == "tool_calls" || key == "function_call") {
          if (value.is_null() || (value.is_array() && value.empty())) continue;
          return ParamError(absl::StrCat(at, ".", key), "tool calls are not supported");
        }
        if (key != "role" && key != "content" && key != "name" && key != "refusal") {
          return ParamError(absl::StrCat(at, ".", key),
                            absl::StrCat("Unrecognized message field: ", key));
        }
      }
      auto role = msg.find("role");
      if (role == msg.end() || !role->is_string()) {
        return ParamError(absl::StrCat(at, ".role"), "every message needs a string 'role'");
      }
      std::string who = role->get<std::string>();
      if (who == "developer") who = "system";  // OpenAI's newer name for the system role
      if (who != "system" && who != "user" && who != "assistant") {
        return ParamError(absl::StrCat(at, ".role"),
                          absl::StrCat("role '", who,
                                       "' is not supported (system, developer, user, assistant)"));
      }
      std::string text;
      auto content = msg.find("content");
      if (content == msg.end() || content->is_null()) {
        if (who != "assistant") {
          return ParamError(absl::StrCat(at, ".content"), "'content' is required");
        }
      } else if (content->is_string()) {
        text = content->get<std::string>();
      } else if (content->is_array()) {
        for (size_t k = 0; k < content->size(); ++k) {
          const Json& part = (*content)[k];
          const std::string pat = absl::StrCat(at, ".content[", k, "]");
          if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
            return ParamError(pat, "a content part needs a string 'type'");
          }
          if (part["type"] != "text" || !part.contains("text") || !part["text"].is_string()) {
            return ParamError(absl::StrCat(pat, ".type"),
                              absl::StrCat("content parts of type ", part["type"].dump(),
                                           " are not supported (text only)"));
          }
          text += part["text"].get<std::string>();
        }
      } else {
        return ParamError(absl::StrCat(at, ".content"),
                          "'content' must be a string or a list of text parts");
      }
      r->messages.push_back({who, std::move(text)});
    }
    return absl::OkStatus();
  }

  const Json& j_;
  const OpenAiEndpoint endpoint_;
};

}  // namespace

absl::Status WithParam(absl::Status status, absl::string_view param) {
  status.SetPayload(kParamPayload, absl::Cord(param));
  return status;
}

absl::Status ParamError(absl::string_view param, absl::string_view message) {
  return WithParam(absl::InvalidArgumentError(message), param);
}

std::string ErrorParam(const absl::Status& status) {
  auto p = status.GetPayload(kParamPayload);
  return p.has_value() ? std::string(*p) : std::string();
}

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(absl::string_view body, OpenAiEndpoint endpoint) {
  Json j = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(
        "the body is not valid JSON (or its strings are not valid UTF-8)");
  }
  if (!j.is_object()) return absl::InvalidArgumentError("the body is not a JSON object");
  return Parser(j, endpoint).Run();
}

}  // namespace cascade
