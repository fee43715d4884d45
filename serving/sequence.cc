#include "serving/sequence.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cascade {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEndOfSequence:
      return "eos";
    case FinishReason::kContextFull:
      return "context";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "?";
}

absl::Status ValidateSequenceRequest(const SequenceRequest& req, int64_t vocab_size,
                                     int64_t context_length) {
  if (req.prompt.empty()) return absl::InvalidArgumentError("prompt is empty");
  for (int32_t id : req.prompt) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt token id ", id, " is outside the vocabulary of ", vocab_size));
    }
  }
  if (static_cast<int64_t>(req.prompt.size()) >= context_length) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", req.prompt.size(),
                                                   " tokens does not fit the context of ",
                                                   context_length, " tokens"));
  }
  if (req.max_tokens < 0 || req.max_tokens > kMaxTokensLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens ", req.max_tokens, " is outside [0, ", kMaxTokensLimit, "]"));
  }
  if (absl::StatusOr<int32_t> fits = ResolveMaxTokens(
          req.max_tokens, static_cast<int32_t>(req.prompt.size()), context_length);
      !fits.ok()) {
    return fits.status();
  }
  if (absl::Status st = req.sampling.Validate(); !st.ok()) return st;
  for (const auto& [tok, bias] : req.sampling.logit_bias) {
    if (tok >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias token ", tok,
                                                     " is outside the vocabulary of ", vocab_size));
    }
  }
  if (req.top_logprobs < 0 || req.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_logprobs ", req.top_logprobs, " is outside [0, ", kMaxTopLogprobs, "]"));
  }
  if (req.stop.size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(
        absl::StrCat(req.stop.size(), " stop strings; at most ", kMaxStopStrings));
  }
  for (const auto& s : req.stop) {
    if (s.size() > kMaxStopBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("a stop string of ", s.size(), " bytes; at most ", kMaxStopBytes));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int32_t> ResolveMaxTokens(int32_t requested, int32_t prompt_len, int64_t room,
                                         const char* what) {
  const int64_t fits = room - prompt_len;
  if (requested > 0 && requested > fits) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens ", requested, " plus the prompt's ",
                                                   prompt_len, " tokens exceeds ", what, " of ",
                                                   room, " tokens"));
  }
  if (fits <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt's ", prompt_len,
                                                   " tokens leave no room in ", what, " of ",
                                                   room, " tokens"));
  }
  return static_cast<int32_t>(requested > 0 ? requested : fits);
}

Sequence::Sequence(const Tokenizer& tokenizer, SequenceRequest request, int32_t max_tokens,
                   int64_t context_length)
    : tokenizer_(&tokenizer),
      request_(std::move(request)),
      tokens_(request_.prompt),
      prompt_len_(static_cast<int32_t>(request_.prompt.size())),
      max_tokens_(max_tokens),
      context_length_(context_length),
      text_(tokenizer, request_.stop, request_.prompt) {}

Sequence::Step Sequence::Accept(int32_t token) {
  Step step;
  if (!request_.ignore_eos && tokenizer_->IsEndOfGeneration(token)) {
    finished_ = step.finished = true;
    step.reason = FinishReason::kEndOfSequence;
    return step;
  }
  tokens_.push_back(token);
  step.appended = true;
  bool stopped = false;
  step.text = text_.Push(token, &stopped);
  const bool context_full = static_cast<int64_t>(tokens_.size()) >= context_length_;
  if (stopped) {
    step.finished = true;
    step.reason = FinishReason::kStop;
  } else if (generated() >= max_tokens_) {
    step.finished = true;
    step.reason = context_full ? FinishReason::kContextFull : FinishReason::kLength;
  } else if (context_full) {
    step.finished = true;
    step.reason = FinishReason::kContextFull;
  }
  finished_ = step.finished;
  return step;
}

std::string Sequence::Flush() { return text_.Finish(); }

}  // namespace cascade
