// Gemma 2: the embeddings scaled by sqrt(dim); RMSNorm weights used as stored (GGUF files
// hold 1 + w, as llama.cpp's converter writes them); RMSNorms of the attention's and the
// FFN's outputs (post_attention_norm, post_ffw_norm) before each residual add; a
// GELU(tanh)-gated FFN; attention scores soft-capped (attn_logit_softcapping) and so are
// the logits (final_logit_softcapping); sliding-window attention on the even layers; q
// scaled by 1/sqrt(head_dim), except in the 27B, whose query_pre_attn_scalar is dim / heads:
// no GGUF key carries it, so, as llama.cpp does, a GGUF file of 46 layers (only the 27B
// has them) gets 1/sqrt(dim / heads) (gemma2.attention.query_pre_attn_scalar, which no
// converter writes today, would take precedence). RoPE over halves. Hugging Face checkpoints
// (Gemma2ForCausalLM) store the norms as w (norm_weight_offset 1 restores 1 + w), name
// their four norms per layer their own way, and give query_pre_attn_scalar.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/arch.h"
#include "nlohmann/json.hpp"
#include "util/status_macros.h"

namespace cascade {
namespace {

// The block both formats describe the same way.
void SetGemma2Block(ModelConfig* c) {
  c->rope_layout = RopeLayout::kHalves;
  c->qkv_bias = false;
  c->scale_embeddings = true;
  c->post_norms = true;
  c->ffn_activation = FfnActivation::kGeluTanh;
  c->sliding_window_period = 2;  // layers 0, 2, 4, ...
}

absl::Status Gemma2FromGguf(const GgufFile& f, ModelConfig* c) {
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeGguf(f, "gemma2", c));
  SetGemma2Block(c);
  CASCADE_ASSIGN_OR_RETURN(c->attn_softcap, f.GetFloatOr("gemma2.attn_logit_softcapping", 0.0));
  CASCADE_ASSIGN_OR_RETURN(c->final_softcap, f.GetFloatOr("gemma2.final_logit_softcapping", 0.0));
  CASCADE_ASSIGN_OR_RETURN(c->sliding_window, f.GetIntOr("gemma2.attention.sliding_window", 0));
  const std::string key = "gemma2.attention.query_pre_attn_scalar";
  constexpr int64_t k27bLayers = 46;
  const double default_scalar =
      c->n_layers == k27bLayers ? static_cast<double>(c->dim / c->n_heads) : 0.0;
  CASCADE_ASSIGN_OR_RETURN(const double query_scalar, f.GetFloatOr(key, default_scalar));
  return SetQueryPreAttnScalar(query_scalar, absl::StrCat(f.path(), ": GGUF metadata '", key, "'"), c);
}

absl::Status Gemma2FromHf(const nlohmann::json& j, const std::string& path, ModelConfig* c) {
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeHf(j, path, c));
  c->arch = "gemma2";
  SetGemma2Block(c);
  c->norm_weight_offset = 1.0;
  for (const char* key : {"hidden_activation", "hidden_act"}) {
    auto act = j.find(key);
    if (act != j.end() && act->is_string() && *act != "gelu_pytorch_tanh") {
      return absl::UnimplementedError(absl::StrCat(path, ": config.json: '", key,
                                                   "' = ", act->get<std::string>(),
                                                   " is not supported (gelu_pytorch_tanh)"));
    }
  }
  CASCADE_ASSIGN_OR_RETURN(c->attn_softcap, JsonFloat(j, "attn_logit_softcapping", path, 0.0));
  CASCADE_ASSIGN_OR_RETURN(c->final_softcap, JsonFloat(j, "final_logit_softcapping", path, 0.0));
  CASCADE_ASSIGN_OR_RETURN(c->sliding_window, JsonInt(j, "sliding_window", path, 0));
  CASCADE_ASSIGN_OR_RETURN(const double query_scalar,
                           JsonFloat(j, "query_pre_attn_scalar", path, 0.0));
  return SetQueryPreAttnScalar(query_scalar, absl::StrCat(path, ": config.json: 'query_pre_attn_scalar'"),
                       c);
}

constexpr std::string_view kHfClasses[] = {"Gemma2ForCausalLM"};
// Gemma 2's four norms per layer: post_attention_layernorm is the attention's post-norm
// here (the FFN's pre-norm in the Llama map).
constexpr std::pair<std::string_view, std::string_view> kHfLeafNames[] = {
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
};

}  // namespace

const ArchSpec& Gemma2Arch() {
  static const ArchSpec spec{"gemma2", kHfClasses, &Gemma2FromGguf, &Gemma2FromHf, kHfLeafNames};
  return spec;
}

}  // namespace cascade
