// Model architectures: how each one's hyperparameters are read from GGUF metadata and from
// a Hugging Face config.json. One file per architecture in model/arch/.
//
// Contract: the parse functions fill a ModelConfig and return an error naming the file
// and key for a missing or ill-typed field; the caller runs ModelConfig::Validate().
// Registry lookups are thread-safe (static data).
#ifndef CASCADE_MODEL_ARCH_H_
#define CASCADE_MODEL_ARCH_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "nlohmann/json_fwd.hpp"

namespace cascade {

struct ArchSpec {
  std::string_view gguf_name;                    // general.architecture
  std::span<const std::string_view> hf_classes;  // config.json "architectures"
  absl::Status (*from_gguf)(const GgufFile& file, ModelConfig* config);
  absl::Status (*from_hf)(const nlohmann::json& config_json, const std::string& path,
                          ModelConfig* config);
  // Hugging Face layer tensor names (after "model.layers.N.") whose canonical name differs
  // from the shared map's (CanonicalTensorName): {hf leaf, canonical leaf}.
  std::span<const std::pair<std::string_view, std::string_view>> hf_leaf_names = {};
};

const ArchSpec* FindArchByGgufName(std::string_view name);
const ArchSpec* FindArchByHfClass(std::string_view hf_class);
std::string SupportedArchitectures();

// Shared by Llama-like architectures: reads "<prefix>.block_count" etc.
absl::Status ReadLlamaLikeGguf(const GgufFile& file, std::string_view prefix, ModelConfig* c);
// Mixture-of-experts keys "<prefix>.expert_count" etc. (none: a dense model). Top-k weights
// are renormalised when "<prefix>.expert_weights_norm" says so, else `norm_default`.
absl::Status ReadExpertsGguf(const GgufFile& file, std::string_view prefix, bool norm_default,
                             ModelConfig* c);
absl::Status ReadLlamaLikeHf(const nlohmann::json& j, const std::string& path, ModelConfig* c);

// config.json fields, never throwing: a missing or null key gives the fallback (an error
// naming the key when there is none); a value of another type is an error naming it.
absl::StatusOr<int64_t> JsonInt(const nlohmann::json& j, const char* key, const std::string& path,
                                std::optional<int64_t> fallback = std::nullopt);
absl::StatusOr<double> JsonFloat(const nlohmann::json& j, const char* key, const std::string& path,
                                 double fallback);

// Gemma's query_pre_attn_scalar: q scaled by 1/sqrt(scalar) when it is > 0 (0: the default
// 1/sqrt(head_dim)); `where` names the field in the error for a negative or odd value.
absl::Status SetQueryPreAttnScalar(double scalar, const std::string& where, ModelConfig* c);

// Per-architecture specs (model/arch/*.cc).
const ArchSpec& LlamaArch();
const ArchSpec& Qwen2Arch();
const ArchSpec& Qwen3Arch();
const ArchSpec& Phi3Arch();
const ArchSpec& Gemma2Arch();
const ArchSpec& Gemma3Arch();
const ArchSpec& Qwen2MoeArch();
const ArchSpec& Qwen3MoeArch();

}  // namespace cascade

#endif  // CASCADE_MODEL_ARCH_H_
