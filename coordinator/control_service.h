// The Coordinator gRPC service, the control plane workers talk to: Register, Heartbeat,
// the gRPC form of the results stream, and ClusterStatus. A thin adapter: results go to
// the ResultRouter, every other call to the ClusterController; absl::Status becomes
// grpc::Status here.
//
// Contract: thread-safe (gRPC's sync server calls handlers concurrently).
#ifndef CASCADE_COORDINATOR_CONTROL_SERVICE_H_
#define CASCADE_COORDINATOR_CONTROL_SERVICE_H_

#include "cascade/v1/worker.grpc.pb.h"
#include "coordinator/cluster_controller.h"
#include "coordinator/result_router.h"

namespace cascade {

class ControlService final : public v1::Coordinator::Service {
 public:
  // `controller` and `results` must outlive the service; `model_id` names the served
  // model in reports.
  ControlService(ClusterController* controller, ResultRouter* results, std::string model_id)
      : controller_(controller), results_(results), model_id_(std::move(model_id)) {}

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status Results(grpc::ServerContext* ctx, grpc::ServerReader<v1::StepResult>* reader,
                       v1::ResultsAck*) override;
  grpc::Status ClusterStatus(grpc::ServerContext*, const v1::ClusterStatusRequest*,
                             v1::ClusterStatusResponse* resp) override;

 private:
  ClusterController* controller_;
  ResultRouter* results_;
  const std::string model_id_;
};

// The status report of a snapshot (also used by the HTTP API and metrics).
void FillClusterStatus(const ClusterSnapshot& s, const std::string& model_id,
                       v1::ClusterStatusResponse* out);

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_CONTROL_SERVICE_H_
