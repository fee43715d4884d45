// Prompt-lookup drafting for speculative decoding (no draft model): the tokens that
// followed the most recent earlier occurrence of a sequence's last n tokens, the text so
// far (prompt and generated) being its own draft model. Long repeats (code edits,
// quoting, summaries, retrieval answers) draft well; fresh prose drafts nothing.
//
// Policy: try n = max_ngram down to min_ngram; for the first n whose last-n tokens occur
// earlier, propose up to k tokens that followed the latest such occurrence (never past the
// end of the text). Empty when nothing matches. O(length x max_ngram) per call.
// Pure and thread-safe.
#ifndef CASCADE_SERVING_NGRAM_DRAFTER_H_
#define CASCADE_SERVING_NGRAM_DRAFTER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "generation/drafter.h"

namespace cascade {

struct NgramDraftOptions {
  int max_ngram = 3;
  int min_ngram = 1;
};

std::vector<int32_t> DraftByLookup(std::span<const int32_t> tokens, int k,
                                   const NgramDraftOptions& options = {});

// DraftByLookup as a Drafter (generation/drafter.h): it keeps nothing per sequence.
class NgramDrafter final : public Drafter {
 public:
  std::vector<int32_t> Draft(SeqId, std::span<const int32_t> tokens, int k) override {
    return DraftByLookup(tokens, k);
  }
  void Forget(SeqId) override {}
};

}  // namespace cascade

#endif  // CASCADE_SERVING_NGRAM_DRAFTER_H_
