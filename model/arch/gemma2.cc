// Gemma 2: the embeddings scaled by sqrt(dim); RMSNorm weights used as stored (GGUF files
// hold 1 + w, as llama.cpp's converter writes them); RMSNorms of the attention's and the
// FFN's outputs (post_attention_norm, post_ffw_norm) before each residual add; a
// GELU(tanh)-gated FFN; attention scores soft-capped (attn_logit_softcapping) and so are
// the logits (final_logit_softcapping); sliding-window attention on the even layers; q
// scaled by 1/sqrt(head_dim), which is what llama.cpp does for every Gemma 2 but the 27B
// (query_pre_attn_scalar = dim / heads there, which no GGUF key carries: such a file gets
// the head-size scale here too, unless it carries gemma2.attention.query_pre_attn_scalar,
// which no converter writes today). RoPE over halves. Hugging Face checkpoints are not read
// (their norms hold w, not 1 + w, and their layer names differ from the Llama map).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/arch.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

absl::Status Gemma2FromGguf(const GgufFile& f, ModelConfig* c) {
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeGguf(f, "gemma2", c));
  c->rope_layout = RopeLayout::kHalves;
  c->qkv_bias = false;
  c->scale_embeddings = true;
  c->post_norms = true;
  c->ffn_activation = FfnActivation::kGeluTanh;
  CASCADE_ASSIGN_OR_RETURN(c->attn_softcap, f.GetFloatOr("gemma2.attn_logit_softcapping", 0.0));
  CASCADE_ASSIGN_OR_RETURN(c->final_softcap, f.GetFloatOr("gemma2.final_logit_softcapping", 0.0));
  CASCADE_ASSIGN_OR_RETURN(c->sliding_window, f.GetIntOr("gemma2.attention.sliding_window", 0));
  c->sliding_window_period = 2;  // layers 0, 2, 4, ...
  CASCADE_ASSIGN_OR_RETURN(const double query_scalar,
                           f.GetFloatOr("gemma2.attention.query_pre_attn_scalar", 0.0));
  if (query_scalar < 0 || !std::isfinite(query_scalar)) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": GGUF metadata 'gemma2.attention.query_pre_attn_scalar' = ", query_scalar,
        " is not a positive number"));
  }
  if (query_scalar > 0) c->attn_scale = 1.0 / std::sqrt(query_scalar);
  return absl::OkStatus();
}

}  // namespace

const ArchSpec& Gemma2Arch() {
  static const ArchSpec spec{"gemma2", {}, &Gemma2FromGguf, nullptr};
  return spec;
}

}  // namespace cascade
