#include "coordinator/http_api.h"

#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "coordinator/chat_template.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "util/logging.h"
#include "util/secret.h"

namespace cascade {
namespace {

using Json = nlohmann::json;

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kCancelled:
      return 499;
    default:
      return 500;
  }
}

void SendError(httplib::Response& res, const absl::Status& st) {
  const int http = HttpStatusFor(st.code());
  Json body = {{"error",
                {{"message", std::string(st.message())},
                 {"type", http == 400 ? "invalid_request_error" : "server_error"},
                 {"code", absl::StatusCodeToString(st.code())}}}};
  res.status = http;
  res.set_content(body.dump(), "application/json");
}

std::string NewId(const char* prefix) {
  static std::mt19937_64 rng(std::random_device{}());
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
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

// Reads the common sampling/limit fields of a completions body into `req`.
absl::Status ParseCommon(const Json& j, v1::GenerateRequest* req, bool* stream) {
  auto bad = [](const std::string& field, const char* want) {
    return absl::InvalidArgumentError(absl::StrCat("'", field, "' must be ", want));
  };
  auto number = [&](const char* key, float* out) -> absl::Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return absl::OkStatus();
    if (!it->is_number()) return bad(key, "a number");
    *out = it->get<float>();
    return absl::OkStatus();
  };
  if (auto it = j.find("n");
      it != j.end() && !it->is_null() && (!it->is_number_integer() || it->get<int64_t>() != 1)) {
    return absl::InvalidArgumentError("'n' must be 1 (one choice per request)");
  }
  req->set_max_tokens(16);  // OpenAI's default
  if (auto it = j.find("max_tokens"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) return bad("max_tokens", "an integer");
    const int64_t v = it->get<int64_t>();
    if (v < 1 || v > (1 << 24)) return absl::InvalidArgumentError("'max_tokens' is out of range");
    req->set_max_tokens(static_cast<int32_t>(v));
  }
  v1::SamplingParams* s = req->mutable_sampling();
  float temperature = 1.0f, top_p = 1.0f, min_p = 0.0f, presence = 0.0f, frequency = 0.0f,
        repetition = 1.0f, top_k = 0.0f;
  for (auto st :
       {number("temperature", &temperature), number("top_p", &top_p), number("min_p", &min_p),
        number("presence_penalty", &presence), number("frequency_penalty", &frequency),
        number("repetition_penalty", &repetition), number("top_k", &top_k)}) {
    if (!st.ok()) return st;
  }
  s->set_temperature(temperature);
  s->set_top_p(top_p);
  s->set_min_p(min_p);
  s->set_presence_penalty(presence);
  s->set_frequency_penalty(frequency);
  s->set_repetition_penalty(repetition);
  s->set_top_k(static_cast<int32_t>(top_k));
  if (auto it = j.find("seed"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) return bad("seed", "an integer");
    s->set_seed(static_cast<uint64_t>(it->get<int64_t>()));
    s->set_has_seed(true);
  }
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      req->add_stop(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& x : *it) {
        if (!x.is_string()) return bad("stop", "a string or a list of strings");
        req->add_stop(x.get<std::string>());
      }
    } else {
      return bad("stop", "a string or a list of strings");
    }
  }
  if (auto it = j.find("logprobs"); it != j.end() && !it->is_null()) {
    if (it->is_boolean()) {
      req->set_logprobs(it->get<bool>());
    } else if (it->is_number_integer()) {
      req->set_logprobs(it->get<int64_t>() > 0);
    } else {
      return bad("logprobs", "a boolean or an integer");
    }
  }
  *stream = false;
  if (auto it = j.find("stream"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad("stream", "a boolean");
    *stream = it->get<bool>();
  }
  if (auto it = j.find("model"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return bad("model", "a string");
    req->set_model(it->get<std::string>());
  }
  return absl::OkStatus();
}

}  // namespace

HttpApi::HttpApi(ServingBackend* backend, std::string api_key)
    : backend_(backend), api_key_(std::move(api_key)), server_(std::make_unique<httplib::Server>()) {
  Routes();
}

HttpApi::~HttpApi() { Stop(); }

absl::Status HttpApi::Start(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP listen address '", listen, "' is not host:port"));
  }
  const std::string host = listen.substr(0, colon);
  const int port = std::atoi(listen.c_str() + colon + 1);
  port_ =
      port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (port_ <= 0) return absl::UnavailableError(absl::StrCat("HTTP: cannot listen on ", listen));
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  spdlog::info("OpenAI-compatible HTTP API on {}:{}", host, port_);
  return absl::OkStatus();
}

void HttpApi::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void HttpApi::Routes() {
  server_->set_payload_max_length(8 << 20);
  // A port another server holds is an error, never shared: no SO_REUSEPORT.
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  if (!api_key_.empty()) {
    server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path == "/health" || req.path == "/metrics") return httplib::Server::HandlerResponse::Unhandled;
      if (SecretsEqual(req.get_header_value("Authorization"), "Bearer " + api_key_)) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      res.status = 401;
      Json body = {{"error",
                    {{"message", "this API needs its key: 'Authorization: Bearer <key>'"},
                     {"type", "invalid_request_error"},
                     {"param", nullptr},
                     {"code", "invalid_api_key"}}}};
      res.set_content(body.dump(), "application/json");
      return httplib::Server::HandlerResponse::Handled;
    });
  }

  server_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    auto sched = backend_->scheduler();
    res.status = sched.ok() ? 200 : 503;
    Json body = {{"status", sched.ok() ? "ok" : std::string(sched.status().message())}};
    res.set_content(body.dump(), "application/json");
  });

  server_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const v1::ModelInfo info = backend_->model_info();
    Json body = {{"object", "list"},
                 {"data",
                  {{{"id", info.id()},
                    {"object", "model"},
                    {"owned_by", "cascade"},
                    {"context_length", info.context_length()},
                    {"ready", info.ready()}}}}};
    res.set_content(body.dump(), "application/json");
  });

  // Both completion endpoints: parse, render (chat), submit, then answer whole or as SSE.
  auto handle = [this](const httplib::Request& http_req, httplib::Response& res, bool chat) {
    Json j = Json::parse(http_req.body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return SendError(res, absl::InvalidArgumentError("the body is not a JSON object"));
    }
    v1::GenerateRequest req;
    bool stream = false;
    if (absl::Status st = ParseCommon(j, &req, &stream); !st.ok()) return SendError(res, st);
    if (chat) {
      auto it = j.find("messages");
      if (it == j.end() || !it->is_array()) {
        return SendError(res, absl::InvalidArgumentError("'messages' must be a list"));
      }
      std::vector<ChatMessage> messages;
      for (size_t i = 0; i < it->size(); ++i) {
        const Json& m = (*it)[i];
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() ||
            !m.contains("content") || !m["content"].is_string()) {
          return SendError(res, absl::InvalidArgumentError(absl::StrCat(
                                    "messages[", i, "] needs string 'role' and 'content'")));
        }
        messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
      auto prompt = RenderChat(DetectChatFormat(backend_->model().chat_template()), messages);
      if (!prompt.ok()) return SendError(res, prompt.status());
      req.set_prompt(*prompt);
    } else {
      auto it = j.find("prompt");
      if (it == j.end() || it->is_null()) {
        return SendError(res, absl::InvalidArgumentError("'prompt' is required"));
      }
      if (it->is_string()) {
        req.set_prompt(it->get<std::string>());
      } else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
        for (const auto& x : *it) {
          if (!x.is_number_integer()) {
            return SendError(res, absl::InvalidArgumentError("'prompt' mixes ids and text"));
          }
          req.add_prompt_ids(static_cast<int32_t>(x.get<int64_t>()));
        }
      } else {
        return SendError(
            res, absl::InvalidArgumentError("'prompt' must be a string or a list of token ids"));
      }
    }
    const v1::ModelInfo info = backend_->model_info();
    if (!req.model().empty() && req.model() != info.id()) {
      return SendError(
          res, absl::NotFoundError(absl::StrCat("model '", req.model(), "' is not served here")));
    }
    auto sched = backend_->scheduler();
    if (!sched.ok()) return SendError(res, sched.status());
    auto sreq = ToSequenceRequest(req, backend_->model().tokenizer());
    if (!sreq.ok()) return SendError(res, sreq.status());
    auto submitted = (*sched)->Submit(std::move(*sreq));
    if (!submitted.ok()) return SendError(res, submitted.status());
    std::shared_ptr<RequestStream> rs = *submitted;
    const std::string id = NewId(chat ? "chatcmpl" : "cmpl");
    const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
    const std::string object = chat ? "chat.completion" : "text_completion";
    auto usage_json = [](const StreamUsage& u) {
      return Json{{"prompt_tokens", u.prompt_tokens},
                  {"completion_tokens", u.completion_tokens},
                  {"total_tokens", u.prompt_tokens + u.completion_tokens}};
    };
    if (!stream) {
      std::string text;
      std::vector<float> logprobs;
      for (;;) {
        auto e = rs->Next(std::chrono::seconds(600));
        if (!e) {
          rs->Cancel();
          return SendError(res, absl::DeadlineExceededError("generation timed out"));
        }
        text += e->text;
        logprobs.insert(logprobs.end(), e->logprobs.begin(), e->logprobs.end());
        if (!e->last) continue;
        if (!e->status.ok()) return SendError(res, e->status);
        Json choice = {{"index", 0}, {"finish_reason", FinishName(e->finish)}};
        if (chat) {
          choice["message"] = {{"role", "assistant"}, {"content", text}};
        } else {
          choice["text"] = text;
          choice["logprobs"] = req.logprobs() ? Json{{"token_logprobs", logprobs}} : Json();
        }
        Json body = {{"id", id},           {"object", object},    {"created", created},
                     {"model", info.id()}, {"choices", {choice}}, {"usage", usage_json(e->usage)}};
        res.set_content(body.dump(), "application/json");
        return;
      }
    }
    // Server-sent events: one chunk per piece of text, then [DONE].
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [rs, id, created, chat,
                                                           model = info.id()](
                                                              size_t, httplib::DataSink& sink) {
      const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
      bool first = true;
      for (;;) {
        auto e = rs->Next(std::chrono::milliseconds(100));
        if (!e) {
          if (!sink.is_writable()) {
            rs->Cancel();  // the client went away
          }
          continue;
        }
        Json choice = {{"index", 0}, {"finish_reason", nullptr}};
        if (e->last) {
          choice["finish_reason"] = e->status.ok() ? FinishName(e->finish) : "error";
        }
        if (chat) {
          Json delta = {{"content", e->text}};
          if (first) delta["role"] = "assistant";
          choice["delta"] = delta;
        } else {
          choice["text"] = e->text;
        }
        first = false;
        Json chunk = {{"id", id},
                      {"object", chunk_object},
                      {"created", created},
                      {"model", model},
                      {"choices", {choice}}};
        if (e->last && e->status.ok()) {
          chunk["usage"] = {{"prompt_tokens", e->usage.prompt_tokens},
                            {"completion_tokens", e->usage.completion_tokens},
                            {"total_tokens", e->usage.prompt_tokens + e->usage.completion_tokens}};
        }
        if (e->last && !e->status.ok()) {
          chunk["error"] = {{"message", std::string(e->status.message())}};
        }
        const std::string line = "data: " + chunk.dump() + "\n\n";
        if (!sink.write(line.data(), line.size())) {
          rs->Cancel();
          if (!e->last) continue;  // drain to the last event, then stop
        }
        if (e->last) {
          const std::string done = "data: [DONE]\n\n";
          sink.write(done.data(), done.size());
          sink.done();
          return true;
        }
      }
    });
  };
  server_->Post("/v1/completions",
                [handle](const httplib::Request& q, httplib::Response& r) { handle(q, r, false); });
  server_->Post("/v1/chat/completions",
                [handle](const httplib::Request& q, httplib::Response& r) { handle(q, r, true); });
}

}  // namespace cascade
