// OpenAI request bodies: /v1/completions and /v1/chat/completions, parsed and checked into
// the serving core's request model (GenerateSpec): only translation, every default not
// OpenAI's own is GenerateSpec's.
//
// What is supported is supported fully; everything else is refused, never ignored: an
// argument Cascade does not know, or one it knows but cannot honour (tools,
// response_format other than text, suffix, best_of != n, echo with logprobs, image parts),
// is an InvalidArgument whose "param" payload (ErrorParam()) names the argument, as
// OpenAI's own errors do. Numbers are range-checked here with OpenAI's limits (n <= 16,
// logprobs <= 5 for completions, top_logprobs <= 20, logit_bias values in [-100, 100]);
// vocabulary-dependent checks (ids, biases' tokens) come later, at ValidateSequenceRequest.
//
// Contract: pure functions of their input; any byte string is a valid input (fuzzed by
// tests/fuzz/fuzz_openai_request.cc). Thread-safe.
#ifndef CASCADE_SERVING_OPENAI_REQUEST_H_
#define CASCADE_SERVING_OPENAI_REQUEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "serving/chat_template.h"
#include "serving/generate_spec.h"

namespace cascade {

enum class OpenAiEndpoint { kCompletions, kChat };

constexpr int32_t kMaxCompletionLogprobs = 5;
constexpr int32_t kCompletionsDefaultMaxTokens = 16;  // OpenAI's for /v1/completions

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  // Everything the serving core runs. Completions: one prompt per entry of 'prompt'; chat:
  // none yet (the API renders `messages` with the model's chat template into one).
  GenerateSpec spec;
  std::vector<ChatMessage> messages;  // chat
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// Parses a request body. InvalidArgument with ErrorParam() set names what is wrong.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(absl::string_view body, OpenAiEndpoint endpoint);

// An InvalidArgument error about request argument `param` (the payload ErrorParam reads).
absl::Status ParamError(absl::string_view param, absl::string_view message);
// `status` marked as being about argument `param`.
absl::Status WithParam(absl::Status status, absl::string_view param);
// The argument an error is about, "" when none.
std::string ErrorParam(const absl::Status& status);

}  // namespace cascade

#endif  // CASCADE_SERVING_OPENAI_REQUEST_H_
