#include "worker/sequence_samplers.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "generation/sampler.h"

namespace cascade {
namespace {

bool UsesPenalties(const SamplingParams& p) {
  return p.penalty_last_n > 0 && (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f ||
                                  p.presence_penalty != 0.0f);
}

}  // namespace

absl::Status SequenceSamplers::Admit(const std::vector<SequenceSampling>& admitted) {
  size_t added = 0;
  for (const SequenceSampling& s : admitted) added += entries_.count(s.seq) ? 0 : 1;
  if (entries_.size() + added > kMaxSequences) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the last stage already keeps the sampling of ", entries_.size(),
        " sequences (at most ", kMaxSequences, "): finished sequences are not being released"));
  }
  for (const SequenceSampling& s : admitted) {
    Entry& e = entries_[s.seq];
    e.sampling = s;
    e.penalties = UsesPenalties(s.params);
    e.tokens.clear();
  }
  return absl::OkStatus();
}

void SequenceSamplers::Release(const std::vector<SeqId>& released) {
  for (SeqId seq : released) entries_.erase(seq);
}

absl::Status SequenceSamplers::Observe(const Batch& slots) {
  // Where each sequence's tokens in this frame start, checked before anything changes.
  std::map<SeqId, std::pair<int32_t, int32_t>> span;  // first position, next expected
  for (const TokenSlot& s : slots) {
    const auto it = entries_.find(s.seq);
    if (it == entries_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sequence ", s.seq, " was never admitted on this stage (its sampling is unknown)"));
    }
    auto [sp, first] = span.try_emplace(s.seq, s.pos, s.pos);
    if (sp->second.second != s.pos) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sequence ", s.seq, ": position ", s.pos, " follows ", sp->second.second - 1));
    }
    ++sp->second.second;
    const Entry& e = it->second;
    if (first && e.penalties && s.pos > static_cast<int32_t>(e.tokens.size())) {
      return absl::FailedPreconditionError(
          absl::StrCat("sequence ", s.seq, ": tokens before position ", s.pos,
                       " never reached this stage (it holds ", e.tokens.size(), ")"));
    }
  }
  for (const auto& [seq, positions] : span) {
    Entry& e = entries_.at(seq);
    if (e.penalties) e.tokens.resize(static_cast<size_t>(positions.first));
  }
  for (const TokenSlot& s : slots) {
    Entry& e = entries_.at(s.seq);
    if (e.penalties) e.tokens.push_back(s.token);
  }
  return absl::OkStatus();
}

SampledToken SequenceSamplers::Sample(const TokenSlot& slot, std::span<const float> logits) const {
  const Entry& e = entries_.at(slot.seq);
  const uint64_t draw = static_cast<uint64_t>(slot.pos) + 1;
  // The window ends at this slot's token: Observe kept the sequence's tokens up to it.
  std::span<const int32_t> history(e.tokens);
  if (e.penalties) history = history.first(static_cast<size_t>(slot.pos) + 1);
  SampleResult r = cascade::Sample(logits, e.sampling.params, history, draw, e.sampling.logprobs,
                                   e.sampling.top_logprobs);
  return SampledToken{slot.seq, r.token, r.logprob, slot.pos + 1, std::move(r.top)};
}

}  // namespace cascade
