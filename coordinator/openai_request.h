// OpenAI request bodies: /v1/completions and /v1/chat/completions, parsed and checked into
// what the scheduler runs.
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
#ifndef CASCADE_COORDINATOR_OPENAI_REQUEST_H_
#define CASCADE_COORDINATOR_OPENAI_REQUEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cascade/v1/inference.pb.h"
#include "coordinator/chat_template.h"

namespace cascade {

enum class OpenAiEndpoint { kCompletions, kChat };

constexpr int32_t kMaxChoices = 16;         // n (times the number of prompts)
constexpr int32_t kMaxCompletionLogprobs = 5;

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  // Everything one choice needs but its prompt (and seed, for n > 1): model, sampling,
  // max_tokens, stop, logprobs and top_logprobs.
  v1::GenerateRequest base;
  // Completions: one entry per prompt (text or ids); chat: empty.
  struct Prompt {
    std::string text;
    std::vector<int32_t> ids;  // used when non-empty
  };
  std::vector<Prompt> prompts;
  std::vector<ChatMessage> messages;  // chat
  int32_t n = 1;                      // choices per prompt
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: the prompt comes back in front of the text
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

#endif  // CASCADE_COORDINATOR_OPENAI_REQUEST_H_
