// GenerateSpec: what a client asks for, whichever API it came through. The API adapters
// only translate into it (serving/openai_request.h from the OpenAI JSON,
// serving/proto_request.h from the public proto); everything after them (which sequences
// run, with which seeds, how many tokens) is decided once, here and in the sequence policy
// (serving/sequence.h), never per API.
//
// Defaults: a field left as constructed means what its initializer says. The sampling
// defaults are SamplingParams{}'s (generation/sampler.h: temperature 1, no top-k, top-p or
// min-p, no penalties); max_tokens 0 runs to the end of the context (or of the KV cache).
//
// Contract:
// - ExpandSpec checks the prompts (within kMaxPromptBytes / kMaxPromptIds, text or ids but
//   not both, at least one token: empty text is the model's BOS alone, where it has one),
//   tokenizes text prompts as the model asks (BOS, special tokens), and
//   gives one SequenceRequest per (prompt, choice), in that order. Seeds: choice k of
//   prompt p draws from seed + p * n + k when the spec has a seed (so choice 0 is the text
//   a single choice with that seed gives); otherwise each choice gets a random seed, which
//   its usage reports. A resumed request (resume_after_tokens > 0) must have one prompt,
//   one choice and, unless greedy, its seed. Errors are InvalidArgument naming the prompt. The requests are
//   checked against the model's vocabulary and context when submitted
//   (ValidateSequenceRequest, Scheduler::Submit).
// - Plain data and pure functions (but for the random seeds); thread-safe.
#ifndef CASCADE_SERVING_GENERATE_SPEC_H_
#define CASCADE_SERVING_GENERATE_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "generation/sampler.h"
#include "model/tokenizer.h"
#include "serving/sequence.h"

namespace cascade {

constexpr size_t kMaxPromptBytes = 4 << 20;
constexpr int kMaxPromptIds = 1 << 20;
constexpr int32_t kMaxChoices = 16;  // n times the number of prompts

// One prompt: text the server tokenizes, or ids as given (used when non-empty).
struct PromptInput {
  std::string text;
  std::vector<int32_t> ids;
};

struct GenerateSpec {
  std::string model;  // "" = the served model
  std::vector<PromptInput> prompts;
  int32_t n = 1;      // choices per prompt
  bool echo = false;  // each choice's text starts with its prompt's
  SamplingParams sampling;       // its seed is replaced by the one below
  std::optional<uint64_t> seed;  // none: a random seed per choice
  int32_t max_tokens = 0;        // 0: up to the context
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool speculate = true;     // may be decoded speculatively (when the server does)
  // A broken stream resumed: its first this-many tokens are generated again but not sent
  // (one prompt, one choice, and the seed of the first run unless greedy).
  int32_t resume_after_tokens = 0;
  bool logprobs = false;     // each generated token's log-probability
  int32_t top_logprobs = 0;  // and this many likeliest alternatives (implies logprobs)
};

// One sequence to run for a spec.
struct ChoiceRequest {
  int prompt_index = 0;
  int choice = 0;
  SequenceRequest request;
  std::string echo;  // the prompt's text, when the spec echoes it
};

absl::StatusOr<std::vector<ChoiceRequest>> ExpandSpec(const GenerateSpec& spec,
                                                      const Tokenizer& tokenizer);

}  // namespace cascade

#endif  // CASCADE_SERVING_GENERATE_SPEC_H_
