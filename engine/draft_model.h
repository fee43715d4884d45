// DraftModel: a small model with the target's vocabulary that drafts tokens for
// speculative decoding (`--speculative draft --draft-model PATH`). It runs in the process
// that schedules (the coordinator, `cascade serve`, `cascade generate`, rank 0 of
// cascade-mpi), on the CPU, beside the pipeline it drafts for: a draft costs the
// draft model's k one-token steps here and saves up to k trips through every stage.
//
// Contract:
// - Open refuses, with InvalidArgument naming the first difference, a model whose
//   vocabulary is not the target's (its size, or any token's text): a drafted id must
//   mean the same token to the target. Unreadable or unsupported files are refused as
//   ModelSource and Stage refuse them.
// - NewDrafter gives a Drafter (generation/drafter.h) with a KV cache of its own for
//   `options.sequences` sequences (the least recently drafted one is dropped for a new
//   one); drafters share the weights, used in place from the mapped file. The DraftModel
//   must outlive its drafters.
// - Drafts are the draft model's greedy continuation (argmax, F32 KV cache). A drafter
//   keeps each sequence's cache and, on the next call, computes only what changed since
//   (tokens after the longest common prefix with what it fed before), so a step that
//   accepted every draft costs two catch-up positions (the last draft and the sample
//   after it) and k-1 more steps. A catch-up longer than a batch (a new sequence's
//   prompt) is fed one batch a call, with no drafts until it is done.
// - A draft that fails (a batch the draft stage refuses) is logged once per drafter and
//   returns what it drafted so far: the pipeline then verifies fewer tokens; the text is
//   the same.
// - Open is thread-safe; each Drafter is used by one thread.
#ifndef CASCADE_ENGINE_DRAFT_MODEL_H_
#define CASCADE_ENGINE_DRAFT_MODEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "generation/drafter.h"
#include "model/model_source.h"
#include "model/tokenizer.h"

namespace cascade {

struct DraftModelOptions {
  int threads = 1;    // compute threads of each drafter
  // Sequences whose draft cache a drafter keeps: those that draft at once (the scheduler:
  // kSpecMaxRunning; `cascade generate`: 1).
  int sequences = 1;
  int64_t max_batch_tokens = kDefaultMaxBatchTokens;  // positions a draft step feeds at most
};

class DraftModel {
 public:
  static absl::StatusOr<std::unique_ptr<DraftModel>> Open(const std::string& path,
                                                          const Tokenizer& target,
                                                          const DraftModelOptions& options);

  absl::StatusOr<std::unique_ptr<Drafter>> NewDrafter() const;
  const std::string& path() const { return source_->path(); }
  const ModelConfig& config() const { return source_->config(); }

 private:
  DraftModel() = default;
  std::unique_ptr<ModelSource> source_;
  int32_t vocab_ = 0;  // the shared vocabulary's size: drafts are ids below it
  DraftModelOptions options_;
};

// Why `draft` cannot draft for `target`: the first difference between the two
// vocabularies (size, or a token's text), or OK when they are the same.
absl::Status CompareVocabularies(const Tokenizer& target, const Tokenizer& draft);

}  // namespace cascade

#endif  // CASCADE_ENGINE_DRAFT_MODEL_H_
