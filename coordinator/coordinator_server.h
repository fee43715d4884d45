// CoordinatorServer: the coordinator process. It serves, on one port, the public
// Inference API, the standard grpc.health.v1.Health service (NOT_SERVING until every stage
// is loaded, SERVING after), server reflection, and the Coordinator control/data services
// that workers use (Register, Heartbeat, Results, ClusterStatus).
//
// Bring-up (a background thread): read the model's config and tokenizer, wait for the
// expected workers to register, plan the pipeline (coordinator/planner.h), load each stage
// (Worker.LoadStage), connect to stage 0, start the scheduler, report SERVING.
//
// Contract: Start() returns once the server listens; WaitUntilServing() reports bring-up's
// outcome. Every RPC converts absl::Status to grpc::Status at this edge. Thread-safe.
#ifndef CASCADE_COORDINATOR_COORDINATOR_SERVER_H_
#define CASCADE_COORDINATOR_COORDINATOR_SERVER_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace cascade {

struct CoordinatorOptions {
  std::string listen = "0.0.0.0:50051";
  std::string http_listen;  // OpenAI-compatible HTTP API, e.g. 0.0.0.0:8080 ("" = off)
  std::string advertise;    // address workers send results to (default: host:port)
  // Activation frames and results: "tcp" (length-prefixed frames on plain TCP, where the
  // workers offer it; worker/tcp_link.h) or "grpc" (StagePipe / Results streams).
  std::string data_plane = "tcp";
  std::string data_listen;  // TCP data plane for results ("" = listen host, a free port)
  std::string model_path;
  int workers = 1;     // plan once this many workers have registered
  int min_stages = 1;  // pipeline over at least this many of them
  std::chrono::seconds worker_wait{600};
  int threads_per_stage = 0;  // 0: each worker's own setting
  int kv_sequences = 8;       // KV cache sized for this many full-context sequences
  int64_t kv_tokens = 0;      // or exactly this many positions (overrides kv_sequences)
  int kv_block_size = 16;
  int64_t max_batch_tokens = 512;
  int64_t prefill_chunk = 256;
  int max_running = 64;
  int max_waiting = 256;
  std::string device;  // passed to workers ("" = each worker's default)
  double heartbeat_interval_s = 1.0;
};

class CoordinatorServer {
 public:
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(const CoordinatorOptions& o);
  ~CoordinatorServer();

  const std::string& address() const;
  // OK once serving; the bring-up error if it failed; DeadlineExceeded on timeout.
  absl::Status WaitUntilServing(std::chrono::milliseconds timeout);
  void Wait();
  void Shutdown();

  class Impl;

 private:
  explicit CoordinatorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_COORDINATOR_SERVER_H_
