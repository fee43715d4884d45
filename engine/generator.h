// Single-process generation: prefill a prompt, then decode token by token on one Stage
// holding the whole model. `cascade generate` uses it; the cluster coordinator implements
// the same loop across pipeline stages.
//
// Contract: Generate() validates the request (prompt length against the context, sampling
// values, max_tokens) before running; it frees the sequence's KV blocks when it returns,
// whatever the outcome. The callback may stop generation early by returning false.
// Not thread-safe (drives one Stage).
#ifndef CASCADE_ENGINE_GENERATOR_H_
#define CASCADE_ENGINE_GENERATOR_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/sampler.h"
#include "engine/stage.h"
#include "model/tokenizer.h"

namespace cascade {

enum class FinishReason { kLength, kStop, kEndOfSequence, kContextFull, kCancelled };
const char* FinishReasonName(FinishReason r);

struct GenerationRequest {
  std::vector<int32_t> prompt;  // ids, BOS included when the model wants one
  SamplingParams sampling;
  int32_t max_tokens = 256;
  std::vector<std::string> stop;
  bool ignore_eos = false;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids
  std::string text;             // their text (stop string excluded)
  FinishReason finish = FinishReason::kLength;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// Called once per generated token with the text it made visible (may be empty).
// Return false to stop (finish reason kCancelled).
using TokenCallback = std::function<bool(int32_t id, const std::string& text)>;

absl::StatusOr<GenerationResult> Generate(Stage& stage, const Tokenizer& tokenizer,
                                          const GenerationRequest& request,
                                          const TokenCallback& on_token, SeqId seq = 0);

}  // namespace cascade

#endif  // CASCADE_ENGINE_GENERATOR_H_
