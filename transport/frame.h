// StageFrame: one micro-batch step as it travels the pipeline, and its wire form
// (cascade.v1.ActivationFrame of data_plane.proto, version 2); StepResult: the sampled
// tokens the last stage sends back.
//
// A sequence's sampling settings travel once per pipeline: in `admit`, with the frame
// that carries the sequence's first token to that pipeline (after a re-plan, again). The
// last stage keeps them until the sequence is released; a steady decode step carries only
// tokens, positions and sequence ids.
//
// Contract:
// - EncodeFrame never fails. DecodeFrame checks every field of an untrusted frame against
//   what the receiving stage expects (version, plan, stage index, dtype, shape against the
//   payload size, one entry per token in every per-token field, token ids, positions,
//   the admitted sequences' sampling values and sizes) before it copies anything; a bad
//   frame gives InvalidArgument naming the field. First of all it checks the link key (in
//   time that does not depend on the key): a frame without this link's key gives
//   PermissionDenied, and whoever sent it must learn nothing more and change nothing (no
//   error frame).
// - Plain data; thread-compatible.
#ifndef CASCADE_TRANSPORT_FRAME_H_
#define CASCADE_TRANSPORT_FRAME_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cascade/v1/data_plane.pb.h"
#include "generation/batch.h"
#include "generation/sampler.h"

namespace cascade {

constexpr uint32_t kFrameVersion = 2;

// How the last stage samples one sequence, for as long as the sequence runs on the
// pipeline. The draw for the token after position p is draw index p + 1; the penalties
// look at the sequence's own tokens, which every frame carries.
struct SequenceSampling {
  SeqId seq = 0;
  SamplingParams params;
  bool logprobs = false;
  int32_t top_logprobs = 0;  // with logprobs: alternatives to report
};

struct StageFrame {
  uint64_t plan_id = 0;
  uint64_t batch_id = 0;
  uint32_t stage = 0;
  Batch slots;                // one per token
  std::vector<float> hidden;  // (slots, dim) for stages after the first; else empty
  std::vector<SequenceSampling> admit;  // sequences new to this pipeline (see above)
  std::vector<SeqId> release;  // free these sequences' KV (and sampling) before the batch
  // Prefix cache (engine/kv_cache.h), applied in this order around the batch: evict after
  // the releases, attach before the batch, publish after it.
  std::vector<BlockName> evict;
  std::vector<PrefixAttach> attach;
  std::vector<BlockPublish> publish;
  std::string error;           // set: an earlier stage failed this batch; pass it on
  int64_t sent_unix_ns = 0;    // the sender's wall clock when it sent the frame (0: unknown)
};

struct SampledToken {
  SeqId seq = 0;
  int32_t token = 0;
  float logprob = 0;
  int32_t position = 0;
  std::vector<TokenLogprob> top;  // the likeliest tokens (SequenceSampling::top_logprobs of them)
};

struct StepResult {
  uint64_t plan_id = 0;
  uint64_t batch_id = 0;
  std::vector<SampledToken> tokens;
  std::string error;
  int64_t sent_unix_ns = 0;  // the last stage's wall clock when it sent the result
};

// The wall clock in nanoseconds since the epoch, for sent_unix_ns.
int64_t UnixNanos();
// Seconds since `sent_unix_ns` by this host's clock; nullopt when unknown (0) or not in
// [0, 1 h) (another host's clock far off).
std::optional<double> SecondsSince(int64_t sent_unix_ns);

// What a stage accepts.
struct FrameExpectations {
  std::string link_key;  // the inbound link's key (LoadStageRequest.inbound_key)
  uint64_t plan_id = 0;
  uint32_t stage = 0;
  bool first_stage = false;
  int64_t dim = 0;
  int64_t vocab_size = 0;
  int64_t max_batch_tokens = 0;  // tokens one frame may carry
  int64_t context_length = 0;
};

// Limits on the variable-length parts of a frame.
constexpr int64_t kMaxReleasePerFrame = 1 << 16;

// Encoders write the whole message, the link's key (LoadStageRequest's outbound key; ""
// where none is used) included: the decoders refuse a frame or result without it.
void EncodeFrame(const StageFrame& frame, std::string_view link_key, v1::ActivationFrame* out);
absl::StatusOr<StageFrame> DecodeFrame(const v1::ActivationFrame& in, const FrameExpectations& e);

void EncodeResult(const StepResult& result, std::string_view link_key, v1::StepResult* out);
// Checks the result's link key (PermissionDenied), then the plan and the vocabulary.
absl::StatusOr<StepResult> DecodeResult(const v1::StepResult& in, const std::string& link_key,
                                        uint64_t plan_id, int64_t vocab_size);


}  // namespace cascade

#endif  // CASCADE_TRANSPORT_FRAME_H_
