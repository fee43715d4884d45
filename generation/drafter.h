// Drafter: where speculative decoding's drafted tokens come from (serving/scheduler.h
// verifies them through the pipeline). Drafts are proposals only: the scheduler keeps a
// drafted token only where the target's own sample at that position equals it, so a
// drafter affects speed, never the text.
//
// Contract:
// - Draft(seq, tokens, k) returns at most k tokens that may follow `tokens` (the
//   sequence's prompt and confirmed output so far, never including earlier drafts).
//   Calls for one sequence may rewind: `tokens` need not extend the previous call's.
// - Forget(seq) drops whatever the drafter keeps for a sequence that ended or moved; a
//   drafter must also cope with sequences it was never told about ending (it may keep
//   state for a bounded number of them and drop the least recently used).
// - Not thread-safe: one scheduler thread owns a drafter.
#ifndef CASCADE_GENERATION_DRAFTER_H_
#define CASCADE_GENERATION_DRAFTER_H_

#include <cstdint>
#include <span>
#include <vector>

#include "generation/batch.h"

namespace cascade {

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::vector<int32_t> Draft(SeqId seq, std::span<const int32_t> tokens, int k) = 0;
  virtual void Forget(SeqId seq) = 0;
};

}  // namespace cascade

#endif  // CASCADE_GENERATION_DRAFTER_H_
