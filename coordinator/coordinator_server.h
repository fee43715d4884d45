// CoordinatorServer: the coordinator process put together. It opens the served model,
// serves on one port the public Inference API, the standard grpc.health.v1.Health service
// (NOT_SERVING until the cluster serves) and server reflection, and on a port of its own
// the Coordinator control service workers use (join token or mTLS); results from the last
// stage arrive on the data plane (TCP by default); the OpenAI-compatible HTTP API is
// optional. What happens in the
// cluster is the ClusterController's business (coordinator/cluster_controller.h); this
// class only wires servers to it.
//
// With --etcd it is one of the cluster's coordinators (coordinator/leader_election.h): it
// serves everything but stands by, refusing workers' registrations and clients' requests
// (Unavailable, naming the leader) and reporting NOT_SERVING, until it is elected; then it
// brings the cluster up as a coordinator alone does, adopting the workers as they are.
// Should it lose the leadership it stops at once (requests end Unavailable, the workers'
// stages stay loaded for the successor) and calls `on_lost_leadership` (cascade-coordinator
// then starts again as a standby).
//
// Contract: Start() returns once everything listens (a bad model or a taken port is an
// error then); WaitUntilServing() reports bring-up's outcome. Drain() and Shutdown() stop
// it (see ClusterController); a leader then gives the leadership up at once. Thread-safe.
#ifndef CASCADE_COORDINATOR_COORDINATOR_SERVER_H_
#define CASCADE_COORDINATOR_COORDINATOR_SERVER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/cluster_config.h"

namespace cascade {

class CoordinatorServer {
 public:
  // `on_lost_leadership(reason)` is called on a thread of its own, after serving stopped.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const ClusterConfig& config,
      std::function<void(const std::string& reason)> on_lost_leadership = nullptr);
  ~CoordinatorServer();

  // The public gRPC API's address (host:port).
  const std::string& address() const;
  // The control plane's address, where workers register (host:port).
  const std::string& control_address() const;
  int http_port() const;  // 0 without the HTTP API
  // Every address it serves, for start-up lines: "public gRPC 127.0.0.1:50051, HTTP
  // http://127.0.0.1:8080, control 127.0.0.1:50053" (HTTP only when it serves it).
  std::string Addresses() const;
  // The token workers present to register ("" when any may): what workers started in the
  // same process present.
  const std::string& join_token() const;
  // OK once serving; the reason if bring-up failed; DeadlineExceeded on timeout.
  absl::Status WaitUntilServing(std::chrono::milliseconds timeout);
  // Stops admitting (health NOT_SERVING at once), lets running requests finish for up to
  // `timeout`, ends the rest with UNAVAILABLE, unloads the stages and stops serving.
  void Drain(std::chrono::milliseconds timeout);
  void Shutdown();

  class Impl;

 private:
  explicit CoordinatorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_COORDINATOR_SERVER_H_
