// Qwen3 (dense): the Llama layout with a per-head RMSNorm of q and of k (attn_q_norm,
// attn_k_norm, head_dim each) after the projections and before RoPE, RoPE over halves, no
// q/k/v biases, a head size of its own (attention.key_length / head_dim, not dim / heads),
// and tied embeddings on small models.
#include "model/arch.h"
#include "nlohmann/json.hpp"
#include "util/status_macros.h"

namespace cascade {
namespace {

absl::Status Qwen3FromGguf(const GgufFile& f, ModelConfig* c) {
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeGguf(f, "qwen3", c));
  c->rope_layout = RopeLayout::kHalves;
  c->qkv_bias = false;
  c->qk_norm = true;
  return absl::OkStatus();
}

absl::Status Qwen3FromHf(const nlohmann::json& j, const std::string& path, ModelConfig* c) {
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeHf(j, path, c));
  c->arch = "qwen3";
  auto bias = j.find("attention_bias");
  c->qkv_bias = bias != j.end() && bias->is_boolean() && bias->get<bool>();
  c->qk_norm = true;
  return absl::OkStatus();
}

constexpr std::string_view kHfClasses[] = {"Qwen3ForCausalLM"};

}  // namespace

const ArchSpec& Qwen3Arch() {
  static const ArchSpec spec{"qwen3", kHfClasses, &Qwen3FromGguf, &Qwen3FromHf};
  return spec;
}

}  // namespace cascade
