// Sequence: one generation's tokens and text, and the rules that end it. The scheduler
// keeps one per request, whether the request came from a cluster client or from
// `cascade generate` in this process, so every front end applies the same rules:
//
//   - a sampled end-of-generation token (EOS/EOT) ends the sequence and is not shown,
//     unless the request ignores EOS;
//   - a stop string ends it; the text before the stop string is shown, the rest is not;
//   - max_tokens generated ends it (kLength), and so does a full context (kContextFull).
//
// max_tokens follows one rule for every front end (OpenAI HTTP, gRPC, `cascade generate`),
// the one vLLM and OpenAI apply: a request that asks for max_tokens gets exactly that
// many at most, or is refused (InvalidArgument naming the context, the prompt's tokens and
// max_tokens) when they do not fit after its prompt; never cut silently. A request that
// asks for none (0) may generate what the context leaves after its prompt.
//
// Contract:
// - ValidateSequenceRequest checks a request against a model's vocabulary and context
//   (prompt present and short enough, ids in the vocabulary, max_tokens in range and within
//   the context after the prompt, sampling values, stop strings) and names the problem
//   (InvalidArgument). A Sequence assumes a valid request and a max_tokens already
//   resolved (> 0, ResolveMaxTokens) by its owner.
// - Text comes out as TextStream gives it: never a partial UTF-8 character, never text
//   that may still turn out to be part of a stop string.
// - Not thread-safe: one owner thread.
#ifndef CASCADE_SERVING_SEQUENCE_H_
#define CASCADE_SERVING_SEQUENCE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "generation/sampler.h"
#include "generation/text_stream.h"
#include "model/tokenizer.h"

namespace cascade {

enum class FinishReason { kLength, kStop, kEndOfSequence, kContextFull, kCancelled };
const char* FinishReasonName(FinishReason r);

// What a client asks of one sequence.
struct SequenceRequest {
  std::vector<int32_t> prompt;  // ids (BOS included when the model wants one)
  SamplingParams sampling;
  int32_t max_tokens = 0;  // 0: up to the context
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool logprobs = false;     // report each generated token's log-probability
  int32_t top_logprobs = 0;  // and this many most likely alternatives (<= kMaxTopLogprobs)
  bool speculate = true;     // may be decoded speculatively (when the server does)
  // Generated tokens not streamed: a resumed stream's, which the client already has.
  int32_t resume_after = 0;
};

constexpr size_t kMaxStopStrings = 16;
constexpr size_t kMaxStopBytes = 256;
constexpr int32_t kMaxTokensLimit = 1 << 24;

absl::Status ValidateSequenceRequest(const SequenceRequest& req, int64_t vocab_size,
                                     int64_t context_length);

// The one max_tokens rule: how many tokens a sequence of `prompt_len` tokens may generate
// when `room` tokens fit (the model's context, or the KV cache where it holds less; `what`
// names it in errors): what it asked for (`requested` > 0), or, asking for none (0), what
// the room leaves after its prompt. InvalidArgument when the prompt plus `requested`
// exceed the room ("max_tokens 5000 plus the prompt's 12 tokens exceeds the model's
// context of 2048 tokens") or the prompt leaves no room.
constexpr const char* kContextRoom = "the model's context";
constexpr const char* kKvCacheRoom = "the KV cache";
absl::StatusOr<int32_t> ResolveMaxTokens(int32_t requested, int32_t prompt_len, int64_t room,
                                         const char* what = kContextRoom);

class Sequence {
 public:
  // `max_tokens` here is the resolved limit (> 0); the request's own field is kept as
  // the client gave it.
  Sequence(const Tokenizer& tokenizer, SequenceRequest request, int32_t max_tokens,
           int64_t context_length);

  // What one accepted token did.
  struct Step {
    bool appended = false;  // the token became part of the output (not an EOS it ended on)
    std::string text;       // text that became safe to show
    bool finished = false;
    FinishReason reason = FinishReason::kLength;
  };
  // Takes the next sampled token and applies the finish rules. Must not be called once
  // the sequence has finished.
  Step Accept(int32_t token);
  // Text still held back when the sequence ends for a reason other than a stop string
  // (e.g. a partial stop-string prefix that never completed); "" after a stop.
  std::string Flush();

  const SequenceRequest& request() const { return request_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }  // prompt, then generated
  int32_t prompt_len() const { return prompt_len_; }
  int32_t generated() const { return static_cast<int32_t>(tokens_.size()) - prompt_len_; }
  int32_t max_tokens() const { return max_tokens_; }
  bool finished() const { return finished_; }

 private:
  const Tokenizer* tokenizer_;
  SequenceRequest request_;
  std::vector<int32_t> tokens_;
  int32_t prompt_len_ = 0;
  int32_t max_tokens_ = 0;
  int64_t context_length_ = 0;
  TextStream text_;
  bool finished_ = false;
};

}  // namespace cascade

#endif  // CASCADE_SERVING_SEQUENCE_H_
