// Phi-3 (mini / medium, 4k-context and short-factor models): the Llama block with q, k and v
// fused into one attn_qkv (q rows, then k, then v) and gate and up fused into one ffn_up
// (gate rows, then up rows), RoPE over halves, and sliding-window attention on every layer
// (attention.sliding_window). LongRoPE (the 128k models' rope_factors_long/short tensors,
// rope_scaling type "longrope"/"su") is not implemented and such files are refused.
#include "absl/strings/str_cat.h"
#include "model/arch.h"
#include "nlohmann/json.hpp"
#include "util/status_macros.h"

namespace cascade {
namespace {

absl::Status Phi3FromGguf(const GgufFile& f, ModelConfig* c) {
  for (const char* t : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
    if (f.FindTensor(t) != nullptr) {
      return absl::UnimplementedError(absl::StrCat(
          f.path(), ": tensor '", t,
          "': Phi-3 LongRoPE (per-frequency long/short RoPE factors) is not supported"));
    }
  }
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeGguf(f, "phi3", c));
  c->rope_layout = RopeLayout::kHalves;
  c->qkv_bias = false;
  c->fused_projections = true;
  CASCADE_ASSIGN_OR_RETURN(c->sliding_window, f.GetIntOr("phi3.attention.sliding_window", 0));
  c->sliding_window_period = 1;
  return absl::OkStatus();
}

absl::Status Phi3FromHf(const nlohmann::json& j, const std::string& path, ModelConfig* c) {
  auto rs = j.find("rope_scaling");
  if (rs != j.end() && rs->is_object()) {
    return absl::UnimplementedError(absl::StrCat(
        path, ": config.json: rope_scaling: Phi-3 LongRoPE (long/short factors) is not supported"));
  }
  CASCADE_RETURN_IF_ERROR(ReadLlamaLikeHf(j, path, c));
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
