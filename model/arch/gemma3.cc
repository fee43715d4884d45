// Gemma 3 (text): Gemma 2's block (embeddings times sqrt(dim), RMSNorm weights as GGUF
// stores them (1 + w), post-attention and post-FFN norms, GELU(tanh) FFN, RoPE over halves)
// with Qwen3-style per-head RMSNorms of q and k before RoPE and no soft-caps. Five of every
// six layers attend over a sliding window and rotate with a local base (10000, unscaled);
// every sixth attends to all and rotates with rope.freq_base and the file's rope scaling
// (linear 8 in the 4B and larger). q is scaled by 1/sqrt(head_dim), except in the 27B
// (62 layers), whose query_pre_attn_scalar is dim / heads: as for Gemma 2, llama.cpp's
// rule when no GGUF key gives it. Hugging Face Gemma3ForCausalLM (the 1B; the larger models
// are Gemma3ForConditionalGeneration, with a vision tower) stores its norms as w.
#include "absl/strings/str_cat.h"
#include "model/arch.h"
#include "nlohmann/json.hpp"
#include "util/status_macros.h"

namespace cascade {
namespace {

constexpr int64_t kGlobalLayerEvery = 6;  // llama.cpp's and HF's sliding_window_pattern
constexpr double kLocalRopeBase = 10000.0;
constexpr int64_t k27bLayers = 62;

void SetGemma3Block(ModelConfig* c) {
  c->rope_layout = RopeLayout::kHalves;
  c->qkv_bias = false;
  c->qk_norm = true;
  c->scale_embeddings = true;
  c->post_norms = true;
  c->ffn_activation = FfnActivation::kGeluTanh;
  c->global_layer_every = kGlobalLayerEvery;
  c->rope_theta_local = kLocalRopeBase;
}

absl::Status Gemma3FromGguf(const GgufFile& f, ModelConfig* c) {
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeGguf(f, "gemma3", c));
  SetGemma3Block(c);
  CASCADE_ASSIGN_OR_RETURN(c->sliding_window, f.GetIntOr("gemma3.attention.sliding_window", 0));
  const std::string key = "gemma3.attention.query_pre_attn_scalar";
  const double default_scalar =
      c->n_layers == k27bLayers ? static_cast<double>(c->dim / c->n_heads) : 0.0;
  CASCADE_ASSIGN_OR_RETURN(const double query_scalar, f.GetFloatOr(key, default_scalar));
  return SetQueryPreAttnScalar(query_scalar,
                               absl::StrCat(f.path(), ": GGUF metadata '", key, "'"), c);
}

absl::Status Gemma3FromHf(const nlohmann::json& j, const std::string& path, ModelConfig* c) {
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeHf(j, path, c));
  c->arch = "gemma3";
  SetGemma3Block(c);
  c->norm_weight_offset = 1.0;
  auto act = j.find("hidden_activation");
  if (act != j.end() && act->is_string() && *act != "gelu_pytorch_tanh") {
    return absl::UnimplementedError(absl::StrCat(path, ": config.json: 'hidden_activation' = ",
                                                 act->get<std::string>(),
                                                 " is not supported (gelu_pytorch_tanh)"));
  }
  CASCADE_ASSIGN_OR_RETURN(c->sliding_window, JsonInt(j, "sliding_window", path, 0));
  CASCADE_ASSIGN_OR_RETURN(c->global_layer_every,
                           JsonInt(j, "sliding_window_pattern", path, kGlobalLayerEvery));
  CASCADE_ASSIGN_OR_RETURN(c->rope_theta_local,
                           JsonFloat(j, "rope_local_base_freq", path, kLocalRopeBase));
  CASCADE_ASSIGN_OR_RETURN(const double query_scalar,
                           JsonFloat(j, "query_pre_attn_scalar", path, 0.0));
  return SetQueryPreAttnScalar(
      query_scalar, absl::StrCat(path, ": config.json: 'query_pre_attn_scalar'"), c);
}

constexpr std::string_view kHfClasses[] = {"Gemma3ForCausalLM"};
// As Gemma 2's: post_attention_layernorm is the attention's post-norm here.
constexpr std::pair<std::string_view, std::string_view> kHfLeafNames[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
};

}  // namespace

const ArchSpec& Gemma3Arch() {
  static const ArchSpec spec{"gemma3", kHfClasses, &Gemma3FromGguf, &Gemma3FromHf, kHfLeafNames};
  return spec;
}

}  // namespace cascade
