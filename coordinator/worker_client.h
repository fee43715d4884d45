// GrpcWorkerClient: the ClusterController's WorkerClient over the workers' gRPC Worker
// service. One channel per worker address, kept for reuse.
//
// Contract: thread-safe. LoadStage waits up to `load_timeout` (loading a large model's
// layers from disk takes minutes); Unload up to 5 s. Errors carry the worker's message.
#ifndef CASCADE_COORDINATOR_WORKER_CLIENT_H_
#define CASCADE_COORDINATOR_WORKER_CLIENT_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/control_plane.grpc.pb.h"
#include "coordinator/cluster_controller.h"

namespace cascade {

class GrpcWorkerClient : public WorkerClient {
 public:
  explicit GrpcWorkerClient(std::chrono::milliseconds load_timeout = std::chrono::minutes(30))
      : load_timeout_(load_timeout) {}
  absl::Status LoadStage(const WorkerRecord& worker, const v1::LoadStageRequest& req) override;
  absl::Status Unload(const WorkerRecord& worker, uint64_t plan_id) override;
  absl::Status Probe(const WorkerRecord& worker) override;
  // Presented to workers on every call (set before the controller starts).
  void SetCoordinatorSecret(std::string secret) { secret_ = std::move(secret); }

 private:
  v1::Worker::Stub* Stub(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);
  const std::chrono::milliseconds load_timeout_;
  std::string secret_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<v1::Worker::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_WORKER_CLIENT_H_
