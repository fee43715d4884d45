// The gRPC data plane: activation frames on StagePipe.Forward bidirectional streams (frames
// one way, rejection notices the other) and step results on the ResultSink.Results
// stream (data_plane.proto). Senders are ReconnectingLinks (transport/reconnecting_link.h) with gRPC dialers;
// the receiving side is the StagePipe service, which parses each message itself and hands
// it to the process's FrameRouter (transport/inbox.h), exactly as the TCP server does.
//
// Contract:
// - MakeGrpcActivationSender / MakeGrpcResultSender behave as ReconnectingLink says; the
//   peer is named "next stage at <address>" / "coordinator at <address>" in errors.
// - StagePipeService reads raw bytes: bytes that are not a frame end the stream with
//   INVALID_ARGUMENT and a logged reason; a well-formed frame the stage refuses is
//   answered with a FrameAck naming the problem and the stream goes on.
#ifndef CASCADE_TRANSPORT_GRPC_LINK_H_
#define CASCADE_TRANSPORT_GRPC_LINK_H_

#include <chrono>
#include <memory>
#include <string>

#include "cascade/v1/data_plane.grpc.pb.h"
#include "transport/address.h"
#include "transport/inbox.h"
#include "transport/link.h"

namespace cascade {

// `target` is the peer's host:port.
std::unique_ptr<ActivationSender> MakeGrpcActivationSender(const HostPort& target,
                                                           const SenderOptions& options = {});
std::unique_ptr<ResultSender> MakeGrpcResultSender(const HostPort& target,
                                                   const SenderOptions& options = {});

// StagePipe service: routes incoming frames to `router`, which must outlive it.
class StagePipeService final
    : public v1::StagePipe::WithRawCallbackMethod_Forward<v1::StagePipe::Service> {
 public:
  explicit StagePipeService(FrameRouter* router) : router_(router) {}
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Forward(
      grpc::CallbackServerContext* ctx) override;

 private:
  FrameRouter* router_;
};

// ResultSink service: hands each step result to `results` (the same handler the TCP and
// MPI data planes call). A result the handler refuses (e.g. PermissionDenied: not from the
// plan's last stage) ends the stream with that status.
class ResultSinkService final : public v1::ResultSink::Service {
 public:
  explicit ResultSinkService(ResultHandler results) : results_(std::move(results)) {}
  grpc::Status Results(grpc::ServerContext* ctx, grpc::ServerReader<v1::StepResult>* reader,
                       v1::ResultsAck*) override;

 private:
  const ResultHandler results_;
};

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_GRPC_LINK_H_
