// The public gRPC API's requests (proto/cascade/v1/inference.proto) as the serving core's
// request model, and its results back. Only translation: every default and limit is
// GenerateSpec's and the sequence policy's.
//
// The proto's numbers follow proto3: a field not set reads as 0, so each sampling field
// says what its 0 means (temperature 0: greedy; top_k, min_p, penalties 0: off; top_p and
// repetition_penalty 0: off, as 1). An absent `sampling` message therefore means exactly
// what an empty one does (greedy decoding, nothing filtered, the server picks the seed),
// as inference.proto documents.
//
// Contract: pure functions; thread-safe.
#ifndef CASCADE_SERVING_PROTO_REQUEST_H_
#define CASCADE_SERVING_PROTO_REQUEST_H_

#include "absl/status/statusor.h"
#include "cascade/v1/inference.pb.h"
#include "serving/generate_spec.h"
#include "serving/sequence.h"

namespace cascade {

// InvalidArgument for a request without a prompt (neither `prompt` nor `prompt_ids`) or
// with both, naming the fields.
absl::StatusOr<GenerateSpec> SpecFromProto(const v1::GenerateRequest& req);
// The other way, for clients (`cascade generate --server`): a spec of one prompt (text or
// ids) as the request that SpecFromProto reads back into the same spec.
void SpecToProto(const GenerateSpec& spec, v1::GenerateRequest* out);
// Sampling and seed as SpecFromProto reads them (the seed only when has_seed).
SamplingParams SamplingFromProto(const v1::SamplingParams& p);

v1::FinishReason FinishReasonToProto(FinishReason r);

}  // namespace cascade

#endif  // CASCADE_SERVING_PROTO_REQUEST_H_
