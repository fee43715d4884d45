#include "generation/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cascade {

SamplingParams SamplingParams::Greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

absl::Status SamplingParams::Validate() const {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("sampling: ", what));
  };
  if (!std::isfinite(temperature) || temperature < 0 || temperature > 100) {
    return bad(absl::StrCat("temperature ", temperature, " is outside [0, 100]"));
  }
  if (!std::isfinite(top_p) || top_p <= 0 || top_p > 1) {
    return bad(absl::StrCat("top_p ", top_p, " is outside (0, 1]"));
  }
  if (!std::isfinite(min_p) || min_p < 0 || min_p > 1) {
    return bad(absl::StrCat("min_p ", min_p, " is outside [0, 1]"));
  }
  if (top_k < 0) return bad(absl::StrCat("top_k ", top_k, " is negative"));
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0 || repetition_penalty > 10) {
    return bad(absl::StrCat("repetition_penalty ", repetition_penalty, " is outside (0, 10]"));
  }
  if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 2) {
    return bad(absl::StrCat("frequency_penalty ", frequency_penalty, " is outside [-2, 2]"));
  }
  if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 2) {
    return bad(absl::StrCat("presence_penalty ", presence_penalty, " is outside [-2, 2]"));
  }
  if (penalty_last_n < 0 || penalty_last_n > kMaxPenaltyWindow) {
    return bad(absl::StrCat("penalty_last_n ", penalty_last_n, " is outside [0, ",
                            kMaxPenaltyWindow, "]"));
  }
  if (logit_bias.size() > kMaxLogitBias) {
    return bad(absl::StrCat("logit_bias has ", logit_bias.size(), " entries; at most ",
                            kMaxLogitBias));
  }
  for (size_t i = 0; i < logit_bias.size(); ++i) {
    const auto& [tok, bias] = logit_bias[i];
    if (tok < 0) return bad(absl::StrCat("logit_bias token ", tok, " is negative"));
    if (i > 0 && tok <= logit_bias[i - 1].first) {
      return bad(absl::StrCat("logit_bias tokens are not sorted and distinct at ", tok));
    }
    if (!std::isfinite(bias) || std::fabs(bias) > 100) {
      return bad(absl::StrCat("logit_bias for token ", tok, " is ", bias, ", outside [-100, 100]"));
    }
  }
  return absl::OkStatus();
}

std::string SamplingParams::DebugString() const {
  return absl::StrCat("temperature=", temperature, " top_k=", top_k, " top_p=", top_p,
                      " min_p=", min_p, " repetition_penalty=", repetition_penalty,
                      " frequency_penalty=", frequency_penalty,
                      " presence_penalty=", presence_penalty, " seed=", seed,
                      " logit_bias=", logit_bias.size());
}

double UniformDraw(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

SampleResult Sample(std::span<const float> logits, const SamplingParams& p,
                    std::span<const int32_t> history, uint64_t draw_index, bool with_logprob,
                    int32_t top_n) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  // Raw log-softmax for the reported logprob.
  double raw_lse = 0;
  if (with_logprob) {
    const float raw_max = *std::max_element(logits.begin(), logits.end());
    double raw_sum = 0;
    for (float v : logits) raw_sum += std::exp(static_cast<double>(v - raw_max));
    raw_lse = raw_max + std::log(raw_sum);
  }
  auto result = [&](int32_t tok) {
    SampleResult r{tok, with_logprob ? static_cast<float>(logits[tok] - raw_lse) : 0.0f, {}};
    const int32_t n = with_logprob ? std::clamp(top_n, 0, std::min(vocab, kMaxTopLogprobs)) : 0;
    if (n > 0) {
      // The n likeliest in one pass, kept in order (higher logit first, then lower id):
      // no vocabulary-sized buffer per token.
      auto before = [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
      };
      std::array<int32_t, kMaxTopLogprobs> best;
      int32_t have = 0;
      for (int32_t id = 0; id < vocab; ++id) {
        if (have == n && !before(id, best[n - 1])) continue;
        int32_t i = have < n ? have++ : n - 1;
        for (; i > 0 && before(id, best[i - 1]); --i) best[i] = best[i - 1];
        best[i] = id;
      }
      for (int32_t i = 0; i < n; ++i) {
        r.top.push_back({best[i], static_cast<float>(logits[best[i]] - raw_lse)});
      }
    }
    return r;
  };
  const bool penalties =
      !history.empty() &&
      (p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f);
  if (p.greedy() && !penalties && p.logit_bias.empty()) {  // first maximum wins ties, deterministically
    return result(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                       logits.begin()));
  }

  std::vector<float> z(logits.begin(), logits.end());
  // Penalties over the recent window.
  if (penalties) {
    const size_t n =
        p.penalty_last_n == 0 ? 0 : std::min(history.size(), static_cast<size_t>(p.penalty_last_n));
    std::unordered_map<int32_t, int> counts;
    for (size_t i = history.size() - n; i < history.size(); ++i) ++counts[history[i]];
    for (const auto& [tok, cnt] : counts) {
      if (tok < 0 || tok >= vocab) continue;
      float& v = z[tok];
      if (p.repetition_penalty != 1.0f) {
        v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
      }
      v -= static_cast<float>(cnt) * p.frequency_penalty + p.presence_penalty;
    }
  }
  for (const auto& [tok, bias] : p.logit_bias) {
    if (tok < vocab) z[tok] += bias;
  }
  if (p.greedy()) {
    // First maximum wins ties, deterministically.
    return result(static_cast<int32_t>(std::max_element(z.begin(), z.end()) - z.begin()));
  }
  // Candidates sorted by logit (ties by id), cut by top-k.
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  size_t keep = idx.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
    keep = p.top_k;
    std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), better);
  } else {
    std::sort(idx.begin(), idx.end(), better);
  }
  idx.resize(keep);
  // Softmax at temperature.
  std::vector<double> prob(keep);
  const double inv_t = 1.0 / p.temperature;
  const double top = z[idx[0]];
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) {
    prob[i] = std::exp((z[idx[i]] - top) * inv_t);
    sum += prob[i];
  }
  for (auto& v : prob) v /= sum;
  // min-p: drop tokens below min_p times the best probability.
  if (p.min_p > 0) {
    const double floor = p.min_p * prob[0];
    size_t n = 1;
    while (n < keep && prob[n] >= floor) ++n;
    keep = n;
  }
  // top-p: the smallest prefix whose mass reaches top_p.
  if (p.top_p < 1.0f) {
    double mass = 0;
    size_t n = 0;
    while (n < keep) {
      mass += prob[n++];
      if (mass >= p.top_p) break;
    }
    keep = std::max<size_t>(1, n);
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += prob[i];
  const double u = UniformDraw(p.seed, draw_index) * total;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += prob[i];
    if (u < acc) return result(idx[i]);
  }
  return result(idx[keep - 1]);
}

}  // namespace cascade
