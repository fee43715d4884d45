#include "engine/generator.h"

#include <chrono>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "engine/text_stream.h"
#include "util/status_macros.h"

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

absl::StatusOr<GenerationResult> Generate(Stage& stage, const Tokenizer& tokenizer,
                                          const GenerationRequest& req,
                                          const TokenCallback& on_token, SeqId seq) {
  if (!stage.is_first() || !stage.is_last()) {
    return absl::FailedPreconditionError("Generate needs a stage holding the whole model");
  }
  CASCADE_RETURN_IF_ERROR(req.sampling.Validate());
  const int64_t ctx = stage.config().context_length;
  if (req.prompt.empty()) return absl::InvalidArgumentError("prompt is empty");
  if (static_cast<int64_t>(req.prompt.size()) >= ctx) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt of ", req.prompt.size(), " tokens does not fit the context of ", ctx, " tokens"));
  }
  if (req.max_tokens < 0) return absl::InvalidArgumentError("max_tokens is negative");
  for (int32_t id : req.prompt) {
    if (!tokenizer.IsValid(id) || id >= stage.config().vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token id ", id, " is out of range"));
    }
  }
  stage.FreeSequence(seq);
  absl::Cleanup release = [&] { stage.FreeSequence(seq); };

  using Clock = std::chrono::steady_clock;
  GenerationResult result;
  std::vector<int32_t> history = req.prompt;
  TextStream text(tokenizer, req.stop, req.prompt);
  std::vector<float> logits;

  // Prefill in chunks; only the last prompt token needs logits.
  const auto t0 = Clock::now();
  const int64_t chunk = stage.options().max_batch_tokens;
  for (size_t start = 0; start < req.prompt.size(); start += chunk) {
    const size_t end = std::min(req.prompt.size(), start + static_cast<size_t>(chunk));
    Batch batch;
    for (size_t i = start; i < end; ++i) {
      batch.push_back({req.prompt[i], seq, static_cast<int32_t>(i), i + 1 == req.prompt.size()});
    }
    CASCADE_RETURN_IF_ERROR(stage.Forward(batch, {}, &logits));
  }
  const auto t1 = Clock::now();
  result.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  result.finish = FinishReason::kLength;
  for (int32_t step = 0; step < req.max_tokens; ++step) {
    const int32_t pos = static_cast<int32_t>(history.size());
    const SampleResult s = Sample(logits, req.sampling, history, static_cast<uint64_t>(pos),
                                   /*with_logprob=*/false);
    if (!req.ignore_eos && tokenizer.IsEndOfGeneration(s.token)) {
      result.finish = FinishReason::kEndOfSequence;
      break;
    }
    history.push_back(s.token);
    result.tokens.push_back(s.token);
    bool stopped = false;
    std::string piece = text.Push(s.token, &stopped);
    result.text += piece;
    if (on_token && !on_token(s.token, piece)) {
      result.finish = FinishReason::kCancelled;
      break;
    }
    if (stopped) {
      result.finish = FinishReason::kStop;
      break;
    }
    if (step + 1 == req.max_tokens) break;
    if (pos + 1 >= ctx) {
      result.finish = FinishReason::kContextFull;
      break;
    }
    Batch batch = {{s.token, seq, pos, true}};
    CASCADE_RETURN_IF_ERROR(stage.Forward(batch, {}, &logits));
  }
  if (result.finish != FinishReason::kStop && result.finish != FinishReason::kCancelled) {
    std::string tail = text.Finish();
    result.text += tail;
    if (!tail.empty() && on_token) on_token(-1, tail);
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return result;
}

}  // namespace cascade
