// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition / frequency /
// presence penalties and per-token logit biases, reproducible by seed; the sampled token's
// log-probability and the most likely alternatives on request.
//
// Contract:
// - SamplingParams::Validate() rejects out-of-range values with InvalidArgument naming
//   the field; Sample() assumes valid params.
// - Randomness is counter-based: the draw for a token depends only on (seed, draw index),
//   the draw index being the token's position in its sequence. So the same seed gives the
//   same text, and a generation resumed from any point (after a failure, on another node)
//   continues exactly as it would have.
// - Pure function of its inputs; thread-safe.
#ifndef CASCADE_GENERATION_SAMPLER_H_
#define CASCADE_GENERATION_SAMPLER_H_

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace cascade {

// The defaults below are the only sampling defaults: every API and the command line start
// from SamplingParams{} (OpenAI's: temperature 1, the model's own distribution unfiltered).
struct SamplingParams {
  float temperature = 1.0f;         // <= 0: greedy
  int32_t top_k = 0;                // <= 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off (divides positive logits, multiplies negative)
  float frequency_penalty = 0.0f;   // subtracted per occurrence
  float presence_penalty = 0.0f;    // subtracted once if present
  int32_t penalty_last_n = 64;      // window of recent tokens the penalties look at
  uint64_t seed = 0;
  // Added to the logits before the penalties' effect is sampled (OpenAI's logit_bias):
  // (token, bias) sorted by token, each token once, biases in [-100, 100]; -100 in effect
  // bans a token, +100 in effect forces it.
  std::vector<std::pair<int32_t, float>> logit_bias;

  static SamplingParams Greedy();
  bool greedy() const { return temperature <= 0.0f; }
  absl::Status Validate() const;
  std::string DebugString() const;
};

constexpr size_t kMaxLogitBias = 1024;
constexpr int32_t kMaxPenaltyWindow = 1 << 12;  // penalty_last_n's limit
constexpr int32_t kMaxTopLogprobs = 20;

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  bool operator==(const TokenLogprob&) const = default;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;  // log-probability of the token under the model's raw logits
  // The `top_n` most likely tokens under the raw logits, most likely first (ties: lower id).
  std::vector<TokenLogprob> top;
};

// Samples from `logits` (vocab). `history` holds the sequence's previous tokens (for the
// penalties); `draw_index` selects the random draw (the new token's position). The
// logprob costs a pass of exp over the whole vocabulary (~0.2 ms for 32k entries, ~1 ms
// for 128k): with_logprob = false skips it and leaves SampleResult::logprob 0; the token
// is the same either way; top_n (<= kMaxTopLogprobs, with with_logprob) adds that many
// alternatives. The reported log-probabilities are the model's own (raw logits: before
// temperature, penalties and biases), as OpenAI reports them.
SampleResult Sample(std::span<const float> logits, const SamplingParams& params,
                    std::span<const int32_t> history, uint64_t draw_index,
                    bool with_logprob = true, int32_t top_n = 0);

// A uniform double in [0, 1) from (seed, index): SplitMix64 of a mixed counter.
double UniformDraw(uint64_t seed, uint64_t index);

}  // namespace cascade

#endif  // CASCADE_GENERATION_SAMPLER_H_
