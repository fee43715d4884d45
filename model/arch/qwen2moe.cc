// Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2 attention (q/k/v biases, RoPE over
// halves) with a mixture-of-experts FFN: expert_count routed SwiGLU experts of
// expert_feed_forward_length, expert_used_count per token weighted by their router
// probabilities as they are (not renormalised: HF norm_topk_prob false), plus a shared
// expert of expert_shared_feed_forward_length gated by sigmoid(ffn_gate_inp_shexp . h).
// feed_forward_length is not used. GGUF only.
#include "absl/strings/str_cat.h"
#include "model/arch.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

absl::Status Qwen2MoeFromGguf(const GgufFile& f, ModelConfig* c) {
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeGguf(f, "qwen2moe", c));
  c->rope_layout = RopeLayout::kHalves;
  c->qkv_bias = true;
  CASCADE_RETURN_IF_ERROR(ReadExpertsGguf(f, "qwen2moe", /*norm_default=*/false, c));
  if (c->n_experts == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": GGUF metadata 'qwen2moe.expert_count' is missing or 0"));
  }
  return absl::OkStatus();
}

absl::Status Qwen2MoeFromHf(const nlohmann::json&, const std::string& path, ModelConfig*) {
  return absl::UnimplementedError(
      absl::StrCat(path, ": Qwen2-MoE is supported from GGUF files only"));
}

constexpr std::string_view kHfClasses[] = {"Qwen2MoeForCausalLM"};

}  // namespace

const ArchSpec& Qwen2MoeArch() {
  static const ArchSpec spec{"qwen2moe", kHfClasses, &Qwen2MoeFromGguf, &Qwen2MoeFromHf};
  return spec;
}

}  // namespace cascade
