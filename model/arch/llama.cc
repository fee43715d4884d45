// The Llama family: Llama 2 and 3 (with llama3 RoPE scaling), Mistral, TinyLlama, SmolLM.
// Pre-norm decoder, RMSNorm, RoPE, grouped-query attention, SwiGLU FFN, no biases.
// Mixtral is this architecture with experts (GGUF llama.expert_count): the FFN is routed
// SwiGLU experts, the top-k router weights renormalised to sum to 1.
// GGUF "llama" files store q/k rows permuted for adjacent-pair rotation; Hugging Face
// checkpoints rotate halves. Mistral 7B v0.1 attends over a sliding window on every layer
// (config.json sliding_window, GGUF llama.attention.sliding_window when a file has it).
#include "model/arch.h"
#include "nlohmann/json.hpp"
#include "util/status_macros.h"

namespace cascade {
namespace {

absl::Status LlamaFromGguf(const GgufFile& f, ModelConfig* c) {
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeGguf(f, "llama", c));
  c->rope_layout = RopeLayout::kAdjacentPairs;
  c->qkv_bias = false;
  CASCADE_ASSIGN_OR_RETURN(c->sliding_window, f.GetIntOr("llama.attention.sliding_window", 0));
  c->sliding_window_period = 1;
  return ReadExpertsGguf(f, "llama", /*norm_default=*/true, c);
}

absl::Status LlamaFromHf(const nlohmann::json& j, const std::string& path, ModelConfig* c) {
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeHf(j, path, c));
  c->arch = "llama";
  auto bias = j.find("attention_bias");
  c->qkv_bias = bias != j.end() && bias->is_boolean() && bias->get<bool>();
  // MistralConfig's default window is 4096 (Mistral 7B v0.1); later Mistral configs write
  // null (no window), as Llama's may.
  auto archs = j.find("architectures");
  const bool mistral = archs != j.end() && archs->is_array() && !archs->empty() &&
                       (*archs)[0] == "MistralForCausalLM";
  const bool absent = !j.contains("sliding_window");
  CASCADE_ASSIGN_OR_RETURN(c->sliding_window,
                           JsonInt(j, "sliding_window", path, mistral && absent ? 4096 : 0));
  c->sliding_window_period = 1;
  return absl::OkStatus();
}

constexpr std::string_view kHfClasses[] = {"LlamaForCausalLM", "MistralForCausalLM"};

}  // namespace

const ArchSpec& LlamaArch() {
  static const ArchSpec spec{"llama", kHfClasses, &LlamaFromGguf, &LlamaFromHf};
  return spec;
}

}  // namespace cascade
