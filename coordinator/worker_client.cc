#include "coordinator/worker_client.h"

#include "transport/grpc_util.h"

namespace cascade {

v1::Worker::Stub* GrpcWorkerClient::Stub(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto& stub = stubs_[address];
  if (!stub) stub = v1::Worker::NewStub(MakeChannel(address));
  return stub.get();
}

absl::Status GrpcWorkerClient::LoadStage(const WorkerRecord& worker,
                                         const v1::LoadStageRequest& req) {
  grpc::ClientContext ctx;
  ctx.AddMetadata(kCoordinatorMetadata, secret_);
  ctx.set_deadline(std::chrono::system_clock::now() + load_timeout_);
  v1::LoadStageResponse resp;
  return FromGrpc(Stub(worker.address)->LoadStage(&ctx, req, &resp));
}

absl::Status GrpcWorkerClient::Unload(const WorkerRecord& worker, uint64_t plan_id) {
  grpc::ClientContext ctx;
  ctx.AddMetadata(kCoordinatorMetadata, secret_);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::UnloadRequest req;
  req.set_plan_id(plan_id);
  v1::UnloadResponse resp;
  return FromGrpc(Stub(worker.address)->Unload(&ctx, req, &resp));
}

absl::Status GrpcWorkerClient::Probe(const WorkerRecord& worker) {
  grpc::ClientContext ctx;
  ctx.AddMetadata(kCoordinatorMetadata, secret_);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  v1::WorkerStatus status;
  return FromGrpc(Stub(worker.address)->Status(&ctx, v1::StatusRequest(), &status));
}

}  // namespace cascade
