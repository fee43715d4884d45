// Phi-3 (mini / medium, 4k-context and short-factor models): the Llama block with q, k and v
// fused into one attn_qkv (q rows, then k, then v) and gate and up fused into one ffn_up
// (gate rows, then up rows), RoPE over halves, and sliding-window attention on every layer
// (attention.sliding_window). The 128k-context models (Phi-3-*-128k, Phi-3.5, Phi-4-mini)
// use LongRoPE: rope_factors_long/short tensors (GGUF) or rope_scaling "longrope"/"su"
// (config.json), see RopeScalingType::kLongRope.
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/arch.h"
#include "nlohmann/json.hpp"
#include "util/status_macros.h"

namespace cascade {
namespace {

// HF's Phi3LongRoPEScaledRotaryEmbedding (and llama.cpp's converter): the factor on cos and
// sin, from how far the context was stretched.
double LongRopeAttentionFactor(int64_t context, int64_t original) {
  const double scale = static_cast<double>(context) / static_cast<double>(original);
  if (!(scale > 1) || original <= 1) return 1.0;
  return std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(original)));
}

absl::StatusOr<std::vector<float>> ReadFactors(const GgufFile& f, const char* name) {
  const GgufTensorInfo* t = f.FindTensor(name);
  if (t == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight; '",
        name, "' is missing"));
  }
  if (t->type != TensorType::kF32 || t->n_dims != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": tensor '", name, "' must be a 1-D F32 tensor"));
  }
  std::vector<float> v(t->ne[0]);
  std::memcpy(v.data(), t->data, v.size() * sizeof(float));
  return v;
}

// LongRoPE when the file has its factor tensors; Validate() checks their sizes.
absl::Status ReadLongRopeGguf(const GgufFile& f, ModelConfig* c) {
  if (f.FindTensor("rope_factors_long.weight") == nullptr &&
      f.FindTensor("rope_factors_short.weight") == nullptr) {
    return absl::OkStatus();
  }
  RopeScaling& rs = c->rope_scaling;
  rs.type = RopeScalingType::kLongRope;
  CASCADE_ASSIGN_OR_RETURN(rs.long_factors, ReadFactors(f, "rope_factors_long.weight"));
  CASCADE_ASSIGN_OR_RETURN(rs.short_factors, ReadFactors(f, "rope_factors_short.weight"));
  CASCADE_ASSIGN_OR_RETURN(rs.original_context,
                           f.GetIntOr("phi3.rope.scaling.original_context_length", 0));
  if (rs.original_context <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": LongRoPE factors without 'phi3.rope.scaling.original_context_length'"));
  }
  CASCADE_ASSIGN_OR_RETURN(
      rs.attn_factor,
      f.GetFloatOr("phi3.rope.scaling.attn_factor",
                   LongRopeAttentionFactor(c->context_length, rs.original_context)));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> JsonFactors(const nlohmann::json& rs, const char* key,
                                               const std::string& path) {
  auto it = rs.find(key);
  if (it == rs.end() || !it->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": config.json: rope_scaling.", key, " must be a list of numbers"));
  }
  std::vector<float> v;
  for (const auto& x : *it) {
    if (!x.is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": config.json: rope_scaling.", key, " holds a non-number"));
    }
    v.push_back(x.get<float>());
  }
  return v;
}

// config.json's rope_scaling {"type": "longrope" (or "su"), "long_factor": [...],
// "short_factor": [...]} with original_max_position_embeddings beside it.
absl::Status ReadLongRopeHf(const nlohmann::json& j, const std::string& path, ModelConfig* c) {
  auto it = j.find("rope_scaling");
  if (it == j.end() || !it->is_object()) return absl::OkStatus();
  const nlohmann::json& rs = *it;
  std::string type = rs.value("type", rs.value("rope_type", std::string()));
  if (type != "longrope" && type != "su") {
    return absl::UnimplementedError(absl::StrCat(
        path, ": config.json: rope_scaling type '", type, "' is not supported for Phi-3 (longrope)"));
  }
  RopeScaling& s = c->rope_scaling;
  s.type = RopeScalingType::kLongRope;
  CASCADE_ASSIGN_OR_RETURN(s.long_factors, JsonFactors(rs, "long_factor", path));
  CASCADE_ASSIGN_OR_RETURN(s.short_factors, JsonFactors(rs, "short_factor", path));
  CASCADE_ASSIGN_OR_RETURN(s.original_context,
                           JsonInt(j, "original_max_position_embeddings", path, 0));
  if (s.original_context <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": config.json: LongRoPE needs original_max_position_embeddings"));
  }
  CASCADE_ASSIGN_OR_RETURN(
      s.attn_factor, JsonFloat(rs, "attention_factor", path,
                               LongRopeAttentionFactor(c->context_length, s.original_context)));
  return absl::OkStatus();
}

absl::Status Phi3FromGguf(const GgufFile& f, ModelConfig* c) {
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeGguf(f, "phi3", c));
  CASCADE_RETURN_IF_ERROR(ReadLongRopeGguf(f, c));
  c->rope_layout = RopeLayout::kHalves;
  c->qkv_bias = false;
  c->fused_projections = true;
  CASCADE_ASSIGN_OR_RETURN(c->sliding_window, f.GetIntOr("phi3.attention.sliding_window", 0));
  c->sliding_window_period = 1;
  return absl::OkStatus();
}

absl::Status Phi3FromHf(const nlohmann::json& j, const std::string& path, ModelConfig* c) {
  // ReadLlamaLikeHf knows linear and llama3 scaling only: it reads the rest without it.
  nlohmann::json rest = j;
  rest.erase("rope_scaling");
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeHf(rest, path, c));
  // Phi-4-mini rotates a part of each head (partial_rotary_factor 0.75).
  CASCADE_ASSIGN_OR_RETURN(const double partial, JsonFloat(j, "partial_rotary_factor", path, 1.0));
  if (!(partial > 0 && partial <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": config.json: partial_rotary_factor ", partial, " is not in (0, 1]"));
  }
  c->rope_dim = static_cast<int64_t>(std::lround(partial * static_cast<double>(c->head_dim)));
  CASCADE_RETURN_IF_ERROR(ReadLongRopeHf(j, path, c));
  c->arch = "phi3";
  c->qkv_bias = false;
  c->fused_projections = true;
  CASCADE_ASSIGN_OR_RETURN(c->sliding_window, JsonInt(j, "sliding_window", path, 0));
  c->sliding_window_period = 1;
  return absl::OkStatus();
}

constexpr std::string_view kHfClasses[] = {"Phi3ForCausalLM"};

}  // namespace

const ArchSpec& Phi3Arch() {
  static const ArchSpec spec{"phi3", kHfClasses, &Phi3FromGguf, &Phi3FromHf};
  return spec;
}

}  // namespace cascade
