#include "model/model_config.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace cascade {

namespace {

absl::Status ValidateLongRope(const ModelConfig& c, const std::string& source) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": model config: LongRoPE ", what));
  };
  if (c.rope_scaling.original_context <= 0 || c.rope_scaling.original_context > c.context_length) {
    return bad(absl::StrCat("original context ", c.rope_scaling.original_context,
                            " is not in [1, the context ", c.context_length, "]"));
  }
  if (!(c.rope_scaling.attn_factor > 0 && c.rope_scaling.attn_factor < 16)) {
    return bad(absl::StrCat("attention factor ", c.rope_scaling.attn_factor));
  }
  for (const auto& [name, v] : {std::pair<const char*, const std::vector<float>*>{
                                    "long factors", &c.rope_scaling.long_factors},
                                {"short factors", &c.rope_scaling.short_factors}}) {
    if (v->size() != static_cast<size_t>(c.rope_dim / 2)) {
      return bad(absl::StrCat(name, ": ", v->size(), " entries, expected ", c.rope_dim / 2,
                              " (half the rotated dimensions)"));
    }
    for (float f : *v) {
      if (!(f > 0 && std::isfinite(f))) return bad(absl::StrCat(name, ": a factor of ", f));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ModelConfig::Validate(const std::string& source) const {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": model config: ", what));
  };
  auto in_range = [&](const char* field, int64_t v, int64_t lo, int64_t hi) -> absl::Status {
    if (v < lo || v > hi) {
      return bad(absl::StrCat(field, " = ", v, " is outside [", lo, ", ", hi, "]"));
    }
    return absl::OkStatus();
  };
  for (auto st :
       {in_range("vocab_size", vocab_size, 1, 1 << 22), in_range("hidden size", dim, 1, 1 << 17),
        in_range("layers", n_layers, 1, 4096), in_range("attention heads", n_heads, 1, 4096),
        in_range("kv heads", n_kv_heads, 1, 4096), in_range("head_dim", head_dim, 2, 4096),
        in_range("ffn size", ffn_dim, 1, 1 << 20),
        in_range("context length", context_length, 1, 1 << 24),
        in_range("rope dimensions", rope_dim, 0, head_dim)}) {
    if (!st.ok()) return st;
  }
  if (n_heads % n_kv_heads != 0) {
    return bad(
        absl::StrCat(n_heads, " attention heads are not a multiple of ", n_kv_heads, " kv heads"));
  }
  if (rope_dim % 2 != 0) return bad(absl::StrCat("rope dimensions ", rope_dim, " is odd"));
  if (!(norm_eps > 0 && norm_eps < 1)) return bad(absl::StrCat("norm epsilon ", norm_eps));
  if (!(rope_theta > 0 && std::isfinite(rope_theta))) {
    return bad(absl::StrCat("rope theta ", rope_theta));
  }
  if (!rope_freq_factors.empty() && rope_freq_factors.size() != static_cast<size_t>(rope_dim / 2)) {
    return bad(absl::StrCat("rope_freqs has ", rope_freq_factors.size(), " entries, expected ",
                            rope_dim / 2));
  }
  if (sliding_window < 0 || sliding_window_period < 1 || global_layer_every < 0) {
    return bad(absl::StrCat("sliding window ", sliding_window, " every ", sliding_window_period,
                            " layers, a global layer every ", global_layer_every));
  }
  if (!(rope_theta_local >= 0 && std::isfinite(rope_theta_local))) {
    return bad(absl::StrCat("local rope theta ", rope_theta_local));
  }
  for (const auto& [what, v] : {std::pair<const char*, double>{"attention soft-cap", attn_softcap},
                                {"final soft-cap", final_softcap},
                                {"attention scale", attn_scale},
                                {"norm weight offset", norm_weight_offset}}) {
    if (!(v >= 0 && std::isfinite(v))) return bad(absl::StrCat(what, " ", v));
  }
  if (n_experts > 0) {
    for (auto st : {in_range("experts", n_experts, 1, 4096),
                    in_range("experts used", n_experts_used, 1, n_experts),
                    in_range("expert ffn size", expert_ffn_dim, 1, 1 << 20),
                    in_range("shared expert ffn size", shared_expert_ffn_dim, 0, 1 << 20)}) {
      if (!st.ok()) return st;
    }
  } else if (n_experts < 0 || n_experts_used != 0 || shared_expert_ffn_dim != 0) {
    return bad(absl::StrCat(n_experts, " experts with ", n_experts_used,
                            " used and a shared expert of ", shared_expert_ffn_dim));
  }
  if (rope_scaling.type != RopeScalingType::kNone &&
      !(rope_scaling.factor > 0 && std::isfinite(rope_scaling.factor))) {
    return bad(absl::StrCat("rope scaling factor ", rope_scaling.factor));
  }
  if (rope_scaling.type == RopeScalingType::kLongRope) return ValidateLongRope(*this, source);
  return absl::OkStatus();
}

std::vector<float> ModelConfig::LocalRopeFrequencies() const {
  ModelConfig local = *this;
  local.rope_theta = rope_theta_local;
  local.rope_scaling = RopeScaling{};
  local.rope_freq_factors.clear();
  return local.RopeFrequencies();
}

float ModelConfig::RopeMagnitude() const {
  return rope_scaling.type == RopeScalingType::kLongRope
             ? static_cast<float>(rope_scaling.attn_factor)
             : 1.0f;
}

float ModelConfig::AttentionScale() const {
  if (attn_scale > 0) return static_cast<float>(attn_scale);
  return 1.0f / std::sqrt(static_cast<float>(head_dim));
}

std::vector<float> ModelConfig::RopeFrequencies() const {
  const int64_t half = rope_dim / 2;
  std::vector<float> freq(half);
  for (int64_t i = 0; i < half; ++i) {
    double f = std::pow(rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(rope_dim));
    if (rope_scaling.type == RopeScalingType::kLongRope) {
      f /= (context_length > rope_scaling.original_context ? rope_scaling.long_factors
                                                           : rope_scaling.short_factors)[i];
    } else if (!rope_freq_factors.empty()) {
      f /= rope_freq_factors[i];
    } else if (rope_scaling.type == RopeScalingType::kLinear) {
      f /= rope_scaling.factor;
    } else if (rope_scaling.type == RopeScalingType::kLlama3) {
      const double old_ctx = static_cast<double>(rope_scaling.original_context);
      const double low_wavelen = old_ctx / rope_scaling.low_freq_factor;
      const double high_wavelen = old_ctx / rope_scaling.high_freq_factor;
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen > low_wavelen) {
        f /= rope_scaling.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_ctx / wavelen - rope_scaling.low_freq_factor) /
                              (rope_scaling.high_freq_factor - rope_scaling.low_freq_factor);
        f = (1.0 - smooth) * f / rope_scaling.factor + smooth * f;
      }
    }
    freq[i] = static_cast<float>(f);
  }
  return freq;
}

int64_t ModelConfig::max_ffn_dim() const {
  return is_moe() ? std::max(expert_ffn_dim, shared_expert_ffn_dim) : ffn_dim;
}

namespace {

// Parameters of the model with `experts` routed experts per layer counted.
int64_t CountParameters(const ModelConfig& c, int64_t experts) {
  int64_t ffn = 3 * c.dim * c.ffn_dim;
  if (c.is_moe()) {
    ffn = c.n_experts * c.dim + experts * 3 * c.dim * c.expert_ffn_dim;  // router + experts
    if (c.shared_expert_ffn_dim > 0) ffn += 3 * c.dim * c.shared_expert_ffn_dim + c.dim;
  }
  const int64_t per_layer = c.dim * c.q_dim() + 2 * c.dim * c.kv_dim() + c.q_dim() * c.dim + ffn +
                            2 * c.dim + (c.qkv_bias ? c.q_dim() + 2 * c.kv_dim() : 0) +
                            (c.qk_norm ? 2 * c.head_dim : 0) + (c.post_norms ? 2 * c.dim : 0);
  return c.vocab_size * c.dim * (c.tied_embeddings ? 1 : 2) + c.n_layers * per_layer + c.dim;
}

}  // namespace

int64_t ModelConfig::ParameterCount() const { return CountParameters(*this, n_experts); }

int64_t ModelConfig::ActiveParameterCount() const { return CountParameters(*this, n_experts_used); }

}  // namespace cascade
