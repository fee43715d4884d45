// The OpenAI-compatible HTTP API, on HttpServer (coordinator/http_server.h):
//   POST /v1/completions, /v1/chat/completions  (plain, or "stream": true as server-sent
//        events); n > 1 and lists of prompts, echo, logprobs / top_logprobs, logit_bias,
//        seed, stop, stream_options.include_usage (serving/openai_request.h lists
//        what is refused, and how)
//   GET  /v1/models, /v1/models/{id}
//   GET  /health   200 while serving, 503 otherwise
//   GET  /metrics  Prometheus text format (when a metrics source is given)
// It runs on the same scheduler as the gRPC API, so batching, limits and cancellation are
// shared; no handler blocks the server's threads.
//
// Contract: errors use OpenAI's shape {"error": {"message", "type", "param", "code"}}:
// 400 (a bad argument, `param` naming it), 401 (no or a wrong API key), 404 (unknown
// model or path), 405 (a known path, another method), 413 (body too large), 429 (queue
// full), 503 (loading, draining or a stage is down). With an API key every path but
// /health, /metrics and CORS preflights needs "Authorization: Bearer KEY". A client that
// disconnects mid-stream cancels its request. Thread-safe; Stop() ends every request
// still open.
#ifndef CASCADE_COORDINATOR_HTTP_API_H_
#define CASCADE_COORDINATOR_HTTP_API_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/http_server.h"
#include "coordinator/serving_target.h"

namespace cascade {

struct HttpApiOptions {
  std::string api_key;      // "" = none needed
  std::string cors_origin;  // Access-Control-Allow-Origin; "" = no CORS headers
  // The body of GET /metrics (Prometheus text format); null = no /metrics.
  std::function<std::string()> metrics;
};

class HttpApi {
 public:
  static absl::StatusOr<std::unique_ptr<HttpApi>> Start(ServingTarget* target,
                                                       const HttpServerOptions& server,
                                                       HttpApiOptions options);
  ~HttpApi();

  void Stop();
  int port() const;

  class Handler;

 private:
  HttpApi() = default;
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_HTTP_API_H_
