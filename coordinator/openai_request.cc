#include "coordinator/openai_request.h"

#include <cmath>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "generation/sampler.h"
#include "generation/sequence.h"
#include "nlohmann/json.hpp"

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
      "top_k", "min_p", "repetition_penalty", "ignore_eos"};
  static const auto* chat = new absl::flat_hash_set<std::string>{
      "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n",
      "stream", "stream_options", "stop", "presence_penalty", "frequency_penalty", "logit_bias",
      "logprobs", "top_logprobs", "seed", "user", "response_format", "tools", "tool_choice",
      "parallel_tool_calls", "functions", "function_call", "store", "metadata", "modalities",
      "service_tier",
      // extensions
      "top_k", "min_p", "repetition_penalty", "ignore_eos"};
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
    if (absl::Status st = Unsupported(); !st.ok()) return st;
    v1::GenerateRequest& g = r.base;
    if (const Json* v = Get("model")) {
      if (!v->is_string()) return Want("model", "a string");
      g.set_model(v->get<std::string>());
    }
    // Limits. Completions default to 16 tokens as OpenAI's do; chat runs to the context.
    g.set_max_tokens(endpoint_ == OpenAiEndpoint::kCompletions ? 16 : 0);
    for (const char* key : {"max_tokens", "max_completion_tokens"}) {
      if (endpoint_ == OpenAiEndpoint::kCompletions && std::string(key) != "max_tokens") continue;
      if (const Json* v = Get(key)) {
        int64_t n;
        if (!Int(*v, &n)) return Want(key, "an integer");
        if (n < 1 || n > kMaxTokensLimit) {
          return ParamError(key, absl::StrCat("'", key, "' must be in [1, ", kMaxTokensLimit, "]"));
        }
        g.set_max_tokens(static_cast<int32_t>(n));
      }
    }
    // Sampling: OpenAI's defaults (temperature 1, top_p 1), no top-k/min-p unless asked.
    v1::SamplingParams* s = g.mutable_sampling();
    s->set_temperature(1.0f);
    s->set_top_p(1.0f);
    struct Num {
      const char* key;
      double lo, hi;
      void (v1::SamplingParams::*set)(float);
    };
    for (const Num& n : {Num{"temperature", 0, 2, &v1::SamplingParams::set_temperature},
                         Num{"top_p", 0, 1, &v1::SamplingParams::set_top_p},
                         Num{"min_p", 0, 1, &v1::SamplingParams::set_min_p},
                         Num{"presence_penalty", -2, 2, &v1::SamplingParams::set_presence_penalty},
                         Num{"frequency_penalty", -2, 2,
                             &v1::SamplingParams::set_frequency_penalty},
                         Num{"repetition_penalty", 0, 10,
                             &v1::SamplingParams::set_repetition_penalty}}) {
      const Json* v = Get(n.key);
      if (v == nullptr) continue;
      if (!v->is_number()) return Want(n.key, "a number");
      const double x = v->get<double>();
      if (!(x >= n.lo && x <= n.hi)) {
        return ParamError(n.key, absl::StrCat("'", n.key, "' must be in [", n.lo, ", ", n.hi, "]"));
      }
      (s->*n.set)(static_cast<float>(x));
    }
    if (s->top_p() == 0.0f) return ParamError("top_p", "'top_p' must be in (0, 1]");
    if (const Json* v = Get("top_k")) {
      int64_t k;
      if (!Int(*v, &k) || k < -1 || k > std::numeric_limits<int32_t>::max()) {
        return Want("top_k", "an integer >= -1 (-1 or 0: off)");
      }
      s->set_top_k(static_cast<int32_t>(std::max<int64_t>(0, k)));
    }
    if (const Json* v = Get("seed")) {
      if (v->is_number_unsigned()) {
        s->set_seed(v->get<uint64_t>());
      } else if (v->is_number_integer()) {
        s->set_seed(static_cast<uint64_t>(v->get<int64_t>()));
      } else {
        return Want("seed", "an integer");
      }
      s->set_has_seed(true);
    }
    if (const Json* v = Get("logit_bias")) {
      if (!v->is_object()) return Want("logit_bias", "an object of token ids to numbers");
      if (v->size() > kMaxLogitBias) {
        return ParamError("logit_bias", absl::StrCat("'logit_bias' has more than ", kMaxLogitBias,
                                                     " entries"));
      }
      for (const auto& [key, bias] : v->items()) {
        int32_t id;
        if (!absl::SimpleAtoi(key, &id) || id < 0) {
          return ParamError("logit_bias", absl::StrCat("'logit_bias' key '", key,
                                                       "' is not a token id"));
        }
        if (!bias.is_number() || !(std::fabs(bias.get<double>()) <= 100)) {
          return ParamError("logit_bias",
                            absl::StrCat("'logit_bias' for token ", id, " must be in [-100, 100]"));
        }
        (*s->mutable_logit_bias())[id] = bias.get<float>();
      }
    }
    if (const Json* v = Get("stop")) {
      if (v->is_string()) {
        g.add_stop(v->get<std::string>());
      } else if (v->is_array()) {
        for (const Json& x : *v) {
          if (!x.is_string()) return Want("stop", "a string or a list of strings");
          g.add_stop(x.get<std::string>());
        }
      } else {
        return Want("stop", "a string or a list of strings");
      }
      if (g.stop_size() > static_cast<int>(kMaxStopStrings)) {
        return ParamError("stop", absl::StrCat("at most ", kMaxStopStrings, " stop strings"));
      }
      for (const std::string& stop : g.stop()) {
        if (stop.empty() || stop.size() > kMaxStopBytes) {
          return ParamError("stop", absl::StrCat("stop strings must have 1 to ", kMaxStopBytes,
                                                 " bytes"));
        }
      }
    }
    if (const Json* v = Get("ignore_eos")) {
      if (!v->is_boolean()) return Want("ignore_eos", "a boolean");
      g.set_ignore_eos(v->get<bool>());
    }
    if (absl::Status st = Logprobs(&g); !st.ok()) return st;
    if (const Json* v = Get("n")) {
      int64_t n;
      if (!Int(*v, &n) || n < 1 || n > kMaxChoices) {
        return ParamError("n", absl::StrCat("'n' must be an integer in [1, ", kMaxChoices, "]"));
      }
      r.n = static_cast<int32_t>(n);
    }
    if (const Json* v = Get("best_of")) {
      int64_t b;
      if (!Int(*v, &b) || b != r.n) {
        return ParamError("best_of", "'best_of' is supported only equal to 'n' (no ranking of "
                                     "candidates by likelihood)");
      }
    }
    if (const Json* v = Get("stream")) {
      if (!v->is_boolean()) return Want("stream", "a boolean");
      r.stream = v->get<bool>();
    }
    if (const Json* v = Get("stream_options")) {
      if (!v->is_object()) return Want("stream_options", "an object");
      if (!r.stream) return ParamError("stream_options", "'stream_options' needs 'stream': true");
      for (const auto& [key, value] : v->items()) {
        if (key == "include_usage") {
          if (!value.is_boolean()) return Want("stream_options.include_usage", "a boolean");
          r.include_usage = value.get<bool>();
        } else if (key != "include_obfuscation" || !value.is_boolean()) {
          return ParamError(absl::StrCat("stream_options.", key),
                            absl::StrCat("Unrecognized stream option: ", key));
        }
      }
    }
    if (const Json* v = Get("user")) {
      if (!v->is_string()) return Want("user", "a string");
    }
    if (endpoint_ == OpenAiEndpoint::kCompletions) {
      if (const Json* v = Get("echo")) {
        if (!v->is_boolean()) return Want("echo", "a boolean");
        r.echo = v->get<bool>();
        if (r.echo && g.logprobs()) {
          return ParamError("echo", "'echo' with 'logprobs' (the prompt's logprobs) is not "
                                    "supported");
        }
      }
      if (absl::Status st = Prompts(&r); !st.ok()) return st;
    } else {
      if (absl::Status st = Messages(&r); !st.ok()) return st;
    }
    const int64_t choices =
        static_cast<int64_t>(r.n) * std::max<int64_t>(1, static_cast<int64_t>(r.prompts.size()));
    if (choices > kMaxChoices) {
      return ParamError(r.prompts.size() > 1 ? "prompt" : "n",
                        absl::StrCat(r.prompts.size(), " prompts x n = ", r.n, " is ", choices,
                                     " choices; at most ", kMaxChoices));
    }
    return r;
  }

 private:
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

  absl::Status Logprobs(v1::GenerateRequest* g) const {
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
        g->set_logprobs(true);
        g->set_top_logprobs(static_cast<int32_t>(n));
      }
      return absl::OkStatus();
    }
    // Chat: logprobs is a boolean, top_logprobs 0..20 needs it.
    if (lp != nullptr) {
      if (!lp->is_boolean()) return Want("logprobs", "a boolean");
      g->set_logprobs(lp->get<bool>());
    }
    if (const Json* top = Get("top_logprobs")) {
      int64_t n;
      if (!Int(*top, &n) || n < 0 || n > kMaxTopLogprobs) {
        return ParamError("top_logprobs", absl::StrCat("'top_logprobs' must be an integer in [0, ",
                                                       kMaxTopLogprobs, "]"));
      }
      if (!g->logprobs()) return ParamError("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      g->set_top_logprobs(static_cast<int32_t>(n));
    }
    return absl::OkStatus();
  }

  absl::Status Prompts(OpenAiRequest* r) const {
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
      OpenAiRequest::Prompt one;
      if (!ids(*p, &one.ids)) return ParamError("prompt", kShape);
      r->prompts.push_back(std::move(one));
    } else if (p->is_array() && !p->empty()) {
      if (p->size() > static_cast<size_t>(kMaxChoices)) {
        return ParamError("prompt", absl::StrCat("at most ", kMaxChoices, " prompts"));
      }
      for (const Json& x : *p) {
        OpenAiRequest::Prompt one;
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
