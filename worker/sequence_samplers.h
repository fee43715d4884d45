// SequenceSamplers: the last stage's copy of how each running sequence is sampled, kept
// from the frame that admits the sequence (transport/frame.h, StageFrame::admit) until the
// frame that releases it, and the sequence's own tokens as the frames carried them, for
// the repetition, frequency and presence penalties. So a steady decode step brings only
// tokens: the settings and the penalty window are already here.
//
// Contract:
// - Admit() replaces whatever was kept for the sequence (a sequence admitted again after a
//   re-send keeps working); Release() forgets it.
// - Observe(batch) must see every frame's tokens in the order the frames arrive, before
//   Sample() is asked for a token of that frame: a sequence's tokens restart wherever its
//   first token in the frame says (a rewound or re-sent batch overwrites what it repeats).
//   A frame that would leave a gap in a sequence's tokens, or that names a sequence this
//   stage never admitted, is refused (FailedPrecondition, naming the sequence) and changes
//   nothing.
// - Sample() is the sampler's (generation/sampler.h): the draw for the token after
//   position p is draw index p + 1, so a sequence resumed anywhere gives the same text.
// - At most kMaxSequences are kept (ResourceExhausted beyond: a scheduler that never
//   releases cannot grow a stage's memory without bound).
// - Not thread-safe: owned by the stage's executor thread.
#ifndef CASCADE_WORKER_SEQUENCE_SAMPLERS_H_
#define CASCADE_WORKER_SEQUENCE_SAMPLERS_H_

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "generation/batch.h"
#include "transport/frame.h"

namespace cascade {

class SequenceSamplers {
 public:
  static constexpr size_t kMaxSequences = 1 << 16;

  absl::Status Admit(const std::vector<SequenceSampling>& admitted);
  void Release(const std::vector<SeqId>& released);
  size_t size() const { return entries_.size(); }

  // Checks the batch (every sequence that wants a token is known, no gap in any
  // sequence's tokens), then records its tokens. Nothing changes on an error.
  absl::Status Observe(const Batch& slots);

  // The token after `slot` (which wants logits), from that position's logits.
  SampledToken Sample(const TokenSlot& slot, std::span<const float> logits) const;

 private:
  struct Entry {
    SequenceSampling sampling;
    bool penalties = false;         // whether the window below is kept at all
    std::vector<int32_t> tokens;    // the sequence's tokens by position (with penalties)
  };
  std::unordered_map<SeqId, Entry> entries_;
};

}  // namespace cascade

#endif  // CASCADE_WORKER_SEQUENCE_SAMPLERS_H_
