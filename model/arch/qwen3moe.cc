// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3 attention (per-head q/k RMSNorm before
// RoPE over halves, its own head size, no biases) with a mixture-of-experts FFN:
// expert_count routed SwiGLU experts of expert_feed_forward_length, expert_used_count per
// token, their router probabilities renormalised to sum to 1 (HF norm_topk_prob, which
// llama.cpp's qwen3moe graph always applies), no shared expert. feed_forward_length is
// not used. GGUF only.
#include "absl/strings/str_cat.h"
#include "model/arch.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

absl::Status Qwen3MoeFromGguf(const GgufFile& f, ModelConfig* c) {
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeGguf(f, "qwen3moe", c));
  c->rope_layout = RopeLayout::kHalves;
  c->qkv_bias = false;
  c->qk_norm = true;
  CASCADE_RETURN_IF_ERROR(ReadExpertsGguf(f, "qwen3moe", /*norm_default=*/true, c));
  if (c->n_experts == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": GGUF metadata 'qwen3moe.expert_count' is missing or 0"));
  }
  return absl::OkStatus();
}

absl::Status Qwen3MoeFromHf(const nlohmann::json&, const std::string& path, ModelConfig*) {
  return absl::UnimplementedError(
      absl::StrCat(path, ": Qwen3-MoE is supported from GGUF files only"));
}

constexpr std::string_view kHfClasses[] = {"Qwen3MoeForCausalLM"};

}  // namespace

const ArchSpec& Qwen3MoeArch() {
  static const ArchSpec spec{"qwen3moe", kHfClasses, &Qwen3MoeFromGguf, &Qwen3MoeFromHf};
  return spec;
}

}  // namespace cascade
