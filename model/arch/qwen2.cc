// Qwen2 / Qwen2.5: the Llama layout plus biases on the q, k and v projections, RoPE over
// halves in both GGUF and Hugging Face files, usually tied embeddings on small models.
#include "model/arch.h"
#include "nlohmann/json.hpp"
#include "util/status_macros.h"

namespace cascade {
namespace {

absl::Status Qwen2FromGguf(const GgufFile& f, ModelConfig* c) {
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeGguf(f, "qwen2", c));
  c->rope_layout = RopeLayout::kHalves;
  c->qkv_bias = true;
  return absl::OkStatus();
}

absl::Status Qwen2FromHf(const nlohmann::json& j, const std::string& path, ModelConfig* c) {
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeHf(j, path, c));
  c->arch = "qwen2";
  c->qkv_bias = true;
  return absl::OkStatus();
}

constexpr std::string_view kHfClasses[] = {"Qwen2ForCausalLM"};

}  // namespace

const ArchSpec& Qwen2Arch() {
  static const ArchSpec spec{"qwen2", kHfClasses, &Qwen2FromGguf, &Qwen2FromHf};
  return spec;
}

}  // namespace cascade
