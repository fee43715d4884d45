#include "coordinator/http_api.h"

#include <chrono>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "serving/chat_template.h"
#include "serving/generate_spec.h"
#include "serving/openai_request.h"
#include "serving/sequence.h"
#include "nlohmann/json.hpp"
#include "util/logging.h"
#include "util/secret.h"

namespace cascade {
namespace {

using Json = nlohmann::json;

// Text from tokens may hold partial UTF-8 (a token's bytes); JSON gets U+FFFD for those.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

int64_t NowSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string NewId(const char* prefix) {
  static absl::Mutex mu(absl::kConstInit);
  static std::mt19937_64 rng(std::random_device{}());
  absl::MutexLock lock(&mu);
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s-%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

const char* FinishName(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
    case FinishReason::kEndOfSequence:
      return "stop";
    case FinishReason::kLength:
    case FinishReason::kContextFull:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "stop";
}

HttpHead JsonHead(int status, const Json& body) {
  HttpHead h;
  h.status = status;
  h.headers = {{"Content-Type", "application/json"}};
  h.body = Dump(body);
  return h;
}

Json ErrorJson(const std::string& message, const char* type, const std::string& param,
               const std::string& code) {
  return Json{{"error",
               {{"message", message},
                {"type", type},
                {"param", param.empty() ? Json() : Json(param)},
                {"code", code.empty() ? Json() : Json(code)}}}};
}

// An absl::Status as OpenAI's error: HTTP status, type and code.
HttpHead ErrorHead(const absl::Status& st) {
  int http = 500;
  const char* type = "server_error";
  std::string code;
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      http = 400;
      type = "invalid_request_error";
      break;
    case absl::StatusCode::kUnauthenticated:
      http = 401;
      type = "invalid_request_error";
      code = "invalid_api_key";
      break;
    case absl::StatusCode::kNotFound:
      http = 404;
      type = "invalid_request_error";
      code = "model_not_found";
      break;
    case absl::StatusCode::kResourceExhausted:
      http = 429;
      type = "rate_limit_error";
      code = "rate_limit_exceeded";
      break;
    case absl::StatusCode::kUnavailable:
      http = 503;
      code = "service_unavailable";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      http = 504;
      code = "timeout";
      break;
    default:
      break;
  }
  return JsonHead(http, ErrorJson(std::string(st.message()), type, ErrorParam(st), code));
}

// The answer to one completion request: one RequestStream per choice, gathered whole or
// streamed as server-sent events.
class CompletionReply final : public HttpReply {
 public:
  struct Choice {
    std::shared_ptr<RequestStream> stream;
    int prompt_index = 0;
    std::string echo;  // text sent in front of the completion (echo)
    uint64_t seed = 0;  // what it samples with: its first streamed chunk says (to resume)
    // Gathered (non-streamed) or per-event state:
    std::string text;
    std::vector<int32_t> ids;
    std::vector<float> logprobs;
    std::vector<std::vector<TokenLogprob>> top;
    bool started = false;  // streamed: the first chunk went out
    bool done = false;
    FinishReason finish = FinishReason::kLength;
    absl::Status status;
    StreamUsage usage;
  };

  CompletionReply(const OpenAiRequest& req, std::string model, const Tokenizer* tokenizer,
                  std::vector<Choice> choices)
      : chat_(req.endpoint == OpenAiEndpoint::kChat),
        stream_(req.stream),
        include_usage_(req.include_usage),
        logprobs_(req.spec.logprobs || req.spec.top_logprobs > 0),
        model_(std::move(model)),
        tokenizer_(tokenizer),
        id_(NewId(chat_ ? "chatcmpl" : "cmpl")),
        created_(NowSeconds()),
        choices_(std::move(choices)) {}

  ~CompletionReply() override { Abandon(); }

  void SetWake(std::function<void()> wake) override {
    for (Choice& c : choices_) c.stream->SetListener(wake);
  }

  std::optional<HttpHead> Head() override {
    if (stream_) {
      HttpHead h;
      h.headers = {{"Content-Type", "text/event-stream"},
                   {"Cache-Control", "no-cache"},
                   {"X-Accel-Buffering", "no"}};
      h.streamed = true;
      return h;
    }
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      while (!c.done) {
        std::optional<StreamEvent> e = c.stream->TryNext();
        if (!e) return std::nullopt;
        Absorb(c, *e);
        if (c.done && !c.status.ok()) {
          Abandon();
          return ErrorHead(c.status);
        }
      }
    }
    finished_ = true;
    Json out = Json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      Json choice = {{"index", i}, {"finish_reason", FinishName(c.finish)}};
      if (chat_) {
        choice["message"] = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}};
        choice["logprobs"] = logprobs_ ? ChatLogprobs(c.ids, c.logprobs, c.top) : Json();
      } else {
        choice["text"] = c.echo + c.text;
        choice["logprobs"] =
            logprobs_ ? CompletionLogprobs(c.ids, c.logprobs, c.top, c.echo.size()) : Json();
      }
      out.push_back(std::move(choice));
    }
    Json body = {{"id", id_},         {"object", chat_ ? "chat.completion" : "text_completion"},
                 {"created", created_}, {"model", model_},
                 {"choices", out},      {"usage", Usage()}};
    if (chat_) body["system_fingerprint"] = nullptr;
    return JsonHead(200, body);
  }

  bool Body(std::string* out) override {
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      if (!c.started) {
        // The first chunk of every choice, its text empty unless echoed: it names the seed
        // (a Cascade extension), which a client that resumes sends back.
        c.started = true;
        Json first = Chunk(i, chat_ ? Json{{"role", "assistant"}, {"content", ""}} : Json(c.echo),
                           Json(), Json());
        first["choices"][0]["seed"] = c.seed;
        out->append(Event(first));
      }
      while (!c.done) {
        std::optional<StreamEvent> e = c.stream->TryNext();
        if (!e) break;
        const size_t offset = c.echo.size() + c.text.size();
        Absorb(c, *e);
        if (c.done && !c.status.ok()) {
          const HttpHead err = ErrorHead(c.status);
          out->append(absl::StrCat("data: ", err.body, "\n\n"));
          continue;
        }
        Json lp;
        if (logprobs_ && !e->ids.empty()) {
          lp = chat_ ? ChatLogprobs(e->ids, e->logprobs, e->top_logprobs)
                     : CompletionLogprobs(e->ids, e->logprobs, e->top_logprobs, offset);
        }
        if (!e->text.empty() || !lp.is_null()) {
          out->append(Event(Chunk(i, chat_ ? Json{{"content", e->text}} : Json(e->text), lp, Json())));
        }
        if (c.done) {
          out->append(Event(Chunk(i, chat_ ? Json::object() : Json(""), Json(),
                                  Json(FinishName(c.finish)))));
        }
      }
    }
    for (const Choice& c : choices_) {
      if (!c.done) return true;
    }
    if (include_usage_) {
      Json chunk = Base();
      chunk["choices"] = Json::array();
      chunk["usage"] = Usage();
      out->append(Event(chunk));
    }
    out->append("data: [DONE]\n\n");
    finished_ = true;
    return false;
  }

  void Abandon() override {
    if (finished_) return;
    for (Choice& c : choices_) {
      if (!c.done) c.stream->Cancel();
    }
  }

 private:
  static void Absorb(Choice& c, const StreamEvent& e) {
    c.text += e.text;
    c.ids.insert(c.ids.end(), e.ids.begin(), e.ids.end());
    c.logprobs.insert(c.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    c.top.insert(c.top.end(), e.top_logprobs.begin(), e.top_logprobs.end());
    if (e.last) {
      c.done = true;
      c.finish = e.finish;
      c.status = e.status;
      c.usage = e.usage;
    }
  }

  Json Usage() const {
    int64_t prompt = 0, completion = 0, cached = 0;
    int last_prompt = -1;
    for (const Choice& c : choices_) {
      if (c.prompt_index != last_prompt) {  // once per prompt
        prompt += c.usage.prompt_tokens;
        cached += c.usage.cached_tokens;
      }
      last_prompt = c.prompt_index;
      completion += c.usage.completion_tokens;
    }
    return Json{{"prompt_tokens", prompt},
                {"completion_tokens", completion},
                {"total_tokens", prompt + completion},
                {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  }

  Json Base() const {
    Json j = {{"id", id_},
              {"object", chat_ ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", model_}};
    if (include_usage_) j["usage"] = nullptr;
    return j;
  }

  // One streamed chunk for choice `i`: `payload` is the chat delta or the completion text.
  Json Chunk(size_t i, Json payload, Json logprobs, Json finish) const {
    Json choice = {{"index", i}, {"logprobs", std::move(logprobs)}, {"finish_reason", finish}};
    choice[chat_ ? "delta" : "text"] = std::move(payload);
    Json j = Base();
    j["choices"] = Json::array({choice});
    return j;
  }

  static std::string Event(const Json& j) { return absl::StrCat("data: ", Dump(j), "\n\n"); }

  std::string Piece(int32_t id) const { return tokenizer_->TokenToPiece(id, true); }

  static Json Bytes(const std::string& s) {
    Json b = Json::array();
    for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
    return b;
  }

  Json ChatLogprobs(const std::vector<int32_t>& ids, const std::vector<float>& lps,
                    const std::vector<std::vector<TokenLogprob>>& top) const {
    Json content = Json::array();
    for (size_t k = 0; k < ids.size() && k < lps.size(); ++k) {
      const std::string piece = Piece(ids[k]);
      Json alts = Json::array();
      if (k < top.size()) {
        for (const TokenLogprob& t : top[k]) {
          const std::string p = Piece(t.token);
          alts.push_back({{"token", p}, {"logprob", t.logprob}, {"bytes", Bytes(p)}});
        }
      }
      content.push_back(
          {{"token", piece}, {"logprob", lps[k]}, {"bytes", Bytes(piece)}, {"top_logprobs", alts}});
    }
    return Json{{"content", content}, {"refusal", nullptr}};
  }

  Json CompletionLogprobs(const std::vector<int32_t>& ids, const std::vector<float>& lps,
                          const std::vector<std::vector<TokenLogprob>>& top,
                          size_t offset) const {
    Json tokens = Json::array(), values = Json::array(), alts = Json::array(),
         offsets = Json::array();
    for (size_t k = 0; k < ids.size() && k < lps.size(); ++k) {
      const std::string piece = Piece(ids[k]);
      tokens.push_back(piece);
      values.push_back(lps[k]);
      offsets.push_back(offset);
      offset += piece.size();
      Json alt = Json::object();
      if (k < top.size()) {
        for (const TokenLogprob& t : top[k]) alt[Piece(t.token)] = t.logprob;
      }
      alts.push_back(top.empty() ? Json() : alt);
    }
    return Json{{"tokens", tokens},
                {"token_logprobs", values},
                {"top_logprobs", alts},
                {"text_offset", offsets}};
  }

  const bool chat_, stream_, include_usage_, logprobs_;
  const std::string model_;
  const Tokenizer* tokenizer_;
  const std::string id_;
  const int64_t created_;
  std::vector<Choice> choices_;
  bool finished_ = false;
};

}  // namespace

class HttpApi::Handler {
 public:
  Handler(ServingTarget* target, HttpApiOptions options)
      : target_(target), options_(std::move(options)), created_(NowSeconds()) {}

  std::unique_ptr<HttpReply> Handle(HttpRequest req) {
    std::unique_ptr<HttpReply> reply = Route(req);
    if (options_.cors_origin.empty()) return reply;
    return std::make_unique<WithCors>(std::move(reply), options_.cors_origin);
  }

 private:
  // Adds the CORS headers to another reply's head.
  class WithCors final : public HttpReply {
   public:
    WithCors(std::unique_ptr<HttpReply> inner, std::string origin)
        : inner_(std::move(inner)), origin_(std::move(origin)) {}
    void SetWake(std::function<void()> wake) override { inner_->SetWake(std::move(wake)); }
    std::optional<HttpHead> Head() override {
      std::optional<HttpHead> h = inner_->Head();
      if (h) {
        h->headers.emplace_back("Access-Control-Allow-Origin", origin_);
        if (origin_ != "*") h->headers.emplace_back("Vary", "Origin");
      }
      return h;
    }
    bool Body(std::string* out) override { return inner_->Body(out); }
    void Abandon() override { inner_->Abandon(); }

   private:
    std::unique_ptr<HttpReply> inner_;
    const std::string origin_;
  };

  static std::unique_ptr<HttpReply> Reply(HttpHead h) { return ImmediateReply(std::move(h)); }

  std::unique_ptr<HttpReply> Route(const HttpRequest& req) {
    const std::string& path = req.path;
    if (req.method == "OPTIONS" && !options_.cors_origin.empty()) {
      HttpHead h;
      h.status = 204;
      const std::string& asked = req.Header("access-control-request-headers");
      h.headers = {{"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
                   {"Access-Control-Allow-Headers",
                    asked.empty() ? "Authorization, Content-Type" : asked},
                   {"Access-Control-Max-Age", "600"}};
      return Reply(std::move(h));
    }
    if (path != "/health" && path != "/metrics" && !options_.api_key.empty() &&
        !BearerMatches(req.Header("authorization"), options_.api_key)) {
      return Reply(JsonHead(401, ErrorJson("this API needs its key: 'Authorization: Bearer <key>'",
                                           "invalid_request_error", "", "invalid_api_key")));
    }
    const bool is_model = absl::StartsWith(path, "/v1/models/") && path.size() > 11;
    const bool known = path == "/health" || path == "/v1/models" || is_model ||
                       path == "/v1/completions" || path == "/v1/chat/completions" ||
                       (path == "/metrics" && options_.metrics);
    if (!known) {
      return Reply(JsonHead(404, ErrorJson(absl::StrCat("no such path: ", req.method, " ", path),
                                           "invalid_request_error", "", "not_found")));
    }
    const char* want = absl::StartsWith(path, "/v1/c") ? "POST" : "GET";
    if (req.method != want && !(req.method == "HEAD" && std::string(want) == "GET")) {
      HttpHead h = JsonHead(405, ErrorJson(absl::StrCat(path, " takes ", want, ", not ", req.method),
                                           "invalid_request_error", "", "method_not_allowed"));
      h.headers.emplace_back("Allow", want);
      return Reply(std::move(h));
    }
    if (path == "/health") {
      auto sched = target_->scheduler();
      return Reply(JsonHead(sched.ok() ? 200 : 503,
                            Json{{"status", sched.ok() ? "ok" : std::string(sched.status().message())}}));
    }
    if (path == "/metrics") {
      HttpHead h;
      h.headers = {{"Content-Type", "text/plain; version=0.0.4; charset=utf-8"}};
      h.body = options_.metrics();
      return Reply(std::move(h));
    }
    if (path == "/v1/models") {
      return Reply(JsonHead(200, Json{{"object", "list"}, {"data", Json::array({ModelJson()})}}));
    }
    if (is_model) {
      const std::string id = path.substr(11);
      if (id != target_->model().id()) {
        return Reply(JsonHead(404, ErrorJson(absl::StrCat("The model '", id, "' does not exist"),
                                             "invalid_request_error", "model", "model_not_found")));
      }
      return Reply(JsonHead(200, ModelJson()));
    }
    const OpenAiEndpoint endpoint =
        path == "/v1/chat/completions" ? OpenAiEndpoint::kChat : OpenAiEndpoint::kCompletions;
    auto reply = Complete(req.body, endpoint);
    if (!reply.ok()) return Reply(ErrorHead(reply.status()));
    return std::move(*reply);
  }

  Json ModelJson() const {
    const v1::ModelInfo info = target_->model_info();
    return Json{{"id", info.id()},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "cascade"},
                {"context_length", info.context_length()},
                {"ready", info.ready()}};
  }

  absl::StatusOr<std::unique_ptr<HttpReply>> Complete(const std::string& body,
                                                      OpenAiEndpoint endpoint) {
    auto parsed = ParseOpenAiRequest(body, endpoint);
    if (!parsed.ok()) return parsed.status();
    OpenAiRequest& req = *parsed;
    const ServedModel& model = target_->model();
    GenerateSpec& spec = req.spec;
    if (!spec.model.empty() && spec.model != model.id()) {
      return WithParam(absl::NotFoundError(absl::StrCat("The model '", spec.model,
                                                        "' does not exist (serving '",
                                                        model.id(), "')")),
                       "model");
    }
    const char* prompt_param = endpoint == OpenAiEndpoint::kChat ? "messages" : "prompt";
    if (endpoint == OpenAiEndpoint::kChat) {
      if (model.chat_format() == ChatFormat::kUnknown) {
        return ParamError("messages",
                          absl::StrCat("this model has no chat template Cascade renders; start "
                                       "the server with --chat-template (",
                                       KnownChatFormats(),
                                       " or a template file), or use /v1/completions"));
      }
      auto prompt = RenderChat(model.chat_format(), req.messages);
      if (!prompt.ok()) return ParamError("messages", prompt.status().message());
      spec.prompts.push_back({*prompt, {}});
    }
    if (auto serving = target_->scheduler(); !serving.ok()) return serving.status();
    auto expanded = ExpandSpec(spec, model.tokenizer());
    if (!expanded.ok()) return ParamError(prompt_param, expanded.status().message());
    std::vector<CompletionReply::Choice> choices;
    for (ChoiceRequest& one : *expanded) {
      // The scheduler applies the same rule; checked here first so the error names the
      // argument (OpenAI's "param") rather than the prompt.
      const int32_t prompt_len = static_cast<int32_t>(one.request.prompt.size());
      const int64_t context = model.config().context_length;
      const absl::StatusOr<int32_t> fits =
          ResolveMaxTokens(one.request.max_tokens, prompt_len, context);
      if (!fits.ok() && prompt_len < context) {
        for (auto& c : choices) c.stream->Cancel();
        return WithParam(fits.status(), "max_tokens");
      }
      // Each prompt goes to the replica the router picks for it (the one holding its
      // beginning, under cache-aware routing).
      auto sched = target_->SchedulerFor(one.request.prompt);
      if (!sched.ok()) {
        for (auto& c : choices) c.stream->Cancel();
        return sched.status();
      }
      const uint64_t seed = one.request.sampling.seed;
      auto submitted = (*sched)->Submit(std::move(one.request));
      if (!submitted.ok()) {
        for (auto& c : choices) c.stream->Cancel();
        const absl::Status& st = submitted.status();
        if (st.code() == absl::StatusCode::kInvalidArgument) {
          return ParamError(prompt_param, st.message());
        }
        return st;
      }
      CompletionReply::Choice c;
      c.stream = *submitted;
      c.prompt_index = one.prompt_index;
      c.echo = std::move(one.echo);
      c.seed = seed;
      choices.push_back(std::move(c));
    }
    return std::unique_ptr<HttpReply>(
        std::make_unique<CompletionReply>(req, model.id(), &model.tokenizer(), std::move(choices)));
  }

  ServingTarget* const target_;
  const HttpApiOptions options_;
  const int64_t created_;
};

absl::StatusOr<std::unique_ptr<HttpApi>> HttpApi::Start(ServingTarget* target,
                                                       const HttpServerOptions& server,
                                                       HttpApiOptions options) {
  std::unique_ptr<HttpApi> api(new HttpApi());
  api->handler_ = std::make_unique<Handler>(target, std::move(options));
  auto started = HttpServer::Start(
      server, [h = api->handler_.get()](HttpRequest req) { return h->Handle(std::move(req)); });
  if (!started.ok()) return started.status();
  api->server_ = std::move(*started);
  spdlog::info("OpenAI-compatible HTTP API on {} (port {})", server.listen, api->server_->port());
  return api;
}

HttpApi::~HttpApi() { Stop(); }

void HttpApi::Stop() {
  if (server_) server_->Stop();
}

int HttpApi::port() const { return server_ ? server_->port() : 0; }

}  // namespace cascade
