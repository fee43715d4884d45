// The public Inference gRPC service (proto/cascade/v1/inference.proto) on top of the
// serving core: translates each request into a GenerateSpec (serving/proto_request.h),
// submits its sequence, streams text back, and maps deadlines and cancellation to the
// scheduler (a client that goes away frees its KV blocks on every
// stage within one step).
//
// Requests are read as the messages of inference_wire.proto (strings as bytes) and checked
// for UTF-8 here, so text that is not UTF-8 gets INVALID_ARGUMENT naming the field rather
// than gRPC's bare INTERNAL parse failure; the service therefore registers its methods
// itself (at the paths inference.proto gives them, as generated code would) instead of
// deriving from the generated v1::Inference::Service.
//
// Contract: every handler checks the caller's bearer token (when --api-key-file is set;
// UNAUTHENTICATED otherwise), validates its request and answers INVALID_ARGUMENT (naming
// the field), RESOURCE_EXHAUSTED (queue full), UNAVAILABLE (still loading) or NOT_FOUND
// (unknown model). Thread-safe (gRPC's sync server calls handlers concurrently).
#ifndef CASCADE_COORDINATOR_INFERENCE_SERVICE_H_
#define CASCADE_COORDINATOR_INFERENCE_SERVICE_H_

#include <array>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cascade/v1/inference.grpc.pb.h"
#include "cascade/v1/inference_wire.pb.h"
#include "coordinator/serving_target.h"

namespace cascade {

// Parses `wire` (a message of inference_wire.proto) as its inference.proto twin, after
// checking that every bytes field is UTF-8 (InvalidArgument naming the first that is not).
absl::Status FromWire(const google::protobuf::Message& wire, google::protobuf::Message* out);

class InferenceServiceImpl final : public grpc::Service {
 public:
  // `api_key`: the bearer token callers must present (metadata "authorization: Bearer
  // KEY"); "" = none needed.
  explicit InferenceServiceImpl(ServingTarget* target, std::string api_key = "");

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer);
  grpc::Status Complete(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        v1::CompleteResponse* resp);
  grpc::Status Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest* req,
                        v1::TokenizeResponse* resp);
  grpc::Status Detokenize(grpc::ServerContext* ctx, const v1::DetokenizeRequest* req,
                          v1::DetokenizeResponse* resp);
  grpc::Status ListModels(grpc::ServerContext* ctx, const v1::ListModelsRequest* req,
                          v1::ListModelsResponse* resp);
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const v1::GetModelInfoRequest* req,
                            v1::ModelInfo* resp);

 private:
  // What a stream's first message tells the client, so it can resume the stream.
  struct StreamHeader {
    std::string request_id;
    uint64_t seed = 0;
  };
  // Submits and calls `on_event` for each event until the last; handles cancellation.
  // `header` is filled before the first event.
  grpc::Status Run(grpc::ServerContext* ctx, const v1::GenerateRequest& req,
                   const std::function<bool(const StreamEvent&)>& on_event,
                   StreamHeader* header = nullptr);
  absl::Status CheckModel(const std::string& model);
  // UNAUTHENTICATED unless the call carries the API key (when one is set).
  grpc::Status Authorize(const grpc::ServerContext* ctx) const;

  ServingTarget* target_;
  const std::string api_key_;
  // The registered methods' paths: gRPC keeps pointers into them.
  enum class Method { kGenerate, kComplete, kTokenize, kDetokenize, kListModels, kGetModelInfo };
  std::array<std::string, 6> paths_;
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_INFERENCE_SERVICE_H_
