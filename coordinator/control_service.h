// The Coordinator gRPC service, the control plane workers talk to: Register, Heartbeat and
// ClusterStatus (the gRPC data plane's results stream is transport/grpc_link.h's
// ResultSinkService, served beside it). A thin adapter: every call goes
// to the ReplicaSet (the coordinator's pipelines); absl::Status becomes grpc::Status here.
//
// Contract: thread-safe (gRPC's sync server calls handlers concurrently).
#ifndef CASCADE_COORDINATOR_CONTROL_SERVICE_H_
#define CASCADE_COORDINATOR_CONTROL_SERVICE_H_

#include <functional>

#include "cascade/v1/control_plane.grpc.pb.h"
#include "coordinator/replica_set.h"

namespace cascade {

class ControlService final : public v1::Coordinator::Service {
 public:
  // `controller` must outlive the service; `model_id` names the served model in reports;
  // `annotate` adds what the replica set does not know (the coordinator's leadership).
  ControlService(ReplicaSet* controller, std::string model_id,
                 std::function<void(v1::ClusterStatusResponse*)> annotate = nullptr)
      : controller_(controller), model_id_(std::move(model_id)), annotate_(std::move(annotate)) {}

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status ClusterStatus(grpc::ServerContext*, const v1::ClusterStatusRequest*,
                             v1::ClusterStatusResponse* resp) override;

 private:
  ReplicaSet* controller_;
  const std::string model_id_;
  const std::function<void(v1::ClusterStatusResponse*)> annotate_;
};

// The status report of a snapshot (also used by the HTTP API and metrics). While the
// cluster serves (or drains) its plan, every stage of it was loaded and answered, so a stage
// whose worker's last heartbeat predates that (still "loading", no KV blocks yet) is
// reported serving with the plan's KV blocks rather than as the heartbeat's stale view.
// Request counts are the snapshot's `requests` (ServingMetrics), as /metrics shows them.
// With several replicas the top-level fields sum them up (see ClusterStatusResponse) and
// `replicas` has each.
void FillClusterStatus(const ReplicaSetSnapshot& s, const std::string& model_id,
                       v1::ClusterStatusResponse* out);

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_CONTROL_SERVICE_H_
