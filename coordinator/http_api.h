// The OpenAI-compatible HTTP API (cpp-httplib): POST /v1/completions and
// /v1/chat/completions (both with "stream": true as server-sent events), GET /v1/models,
// and GET /health (200 when serving, 503 otherwise). It runs on the same scheduler as
// the gRPC API, so batching, limits and cancellation are shared.
//
// Contract: request bodies are validated field by field; errors use OpenAI's shape
// {"error": {"message", "type", "code"}} with 400 (bad request), 404 (unknown model),
// 429 (queue full) or 503 (loading or a stage is down). A client that disconnects
// mid-stream cancels its request. Thread-safe; Stop() joins the server thread.
#ifndef CASCADE_COORDINATOR_HTTP_API_H_
#define CASCADE_COORDINATOR_HTTP_API_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "coordinator/inference_service.h"

namespace httplib {
class Server;
}

namespace cascade {

class HttpApi {
 public:
  // `api_key`: the bearer token requests must carry ("Authorization: Bearer KEY"; /health
  // and /metrics excepted); "" = none needed.
  explicit HttpApi(ServingBackend* backend, std::string api_key = "");
  ~HttpApi();

  // Listens on host:port (port 0 picks one) and serves on a background thread.
  absl::Status Start(const std::string& listen);
  void Stop();
  int port() const { return port_; }

 private:
  void Routes();

  ServingBackend* backend_;
  const std::string api_key_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_HTTP_API_H_
