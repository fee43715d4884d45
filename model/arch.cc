#include "model/arch.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "util/status_macros.h"

namespace cascade {
namespace {

const ArchSpec* const kArchs[] = {&LlamaArch(),  &Qwen2Arch(),  &Qwen3Arch(),
                                  &Phi3Arch(),   &Gemma2Arch(), &Gemma3Arch(),
                                  &Qwen2MoeArch(), &Qwen3MoeArch()};

}  // namespace

absl::Status SetQueryPreAttnScalar(double scalar, const std::string& where, ModelConfig* c) {
  if (scalar < 0 || !std::isfinite(scalar)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " = ", scalar, " is not a positive number"));
  }
  if (scalar > 0) c->attn_scale = 1.0 / std::sqrt(scalar);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> JsonInt(const nlohmann::json& j, const char* key, const std::string& path,
                                std::optional<int64_t> fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat(path, ": config.json: '", key, "' is missing"));
  }
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": config.json: '", key, "' is not an integer"));
  }
  return it->get<int64_t>();
}

absl::StatusOr<double> JsonFloat(const nlohmann::json& j, const char* key, const std::string& path,
                                 double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": config.json: '", key, "' is not a number"));
  }
  return it->get<double>();
}

const ArchSpec* FindArchByGgufName(std::string_view name) {
  for (const ArchSpec* a : kArchs) {
    if (a->gguf_name == name) return a;
  }
  return nullptr;
}

const ArchSpec* FindArchByHfClass(std::string_view hf_class) {
  for (const ArchSpec* a : kArchs) {
    for (std::string_view c : a->hf_classes) {
      if (c == hf_class) return a;
    }
  }
  return nullptr;
}

std::string SupportedArchitectures() {
  std::vector<std::string> names;
  for (const ArchSpec* a : kArchs) {
    std::string s(a->gguf_name);
    s += " (";
    for (size_t i = 0; i < a->hf_classes.size(); ++i) {
      if (i > 0) s += ", ";
      s += a->hf_classes[i];
    }
    s += ")";
    names.push_back(s);
  }
  return absl::StrJoin(names, "; ");
}

absl::Status ReadLlamaLikeGguf(const GgufFile& f, std::string_view prefix_sv, ModelConfig* c) {
  const std::string p(prefix_sv);
  c->arch = p;
  c->name = f.GetString("general.name").value_or("");
  CASCADE_ASSIGN_OR_RETURN(c->n_layers, f.GetInt(p + ".block_count"));
  CASCADE_ASSIGN_OR_RETURN(c->dim, f.GetInt(p + ".embedding_length"));
  CASCADE_ASSIGN_OR_RETURN(c->ffn_dim, f.GetInt(p + ".feed_forward_length"));
  CASCADE_ASSIGN_OR_RETURN(c->n_heads, f.GetInt(p + ".attention.head_count"));
  CASCADE_ASSIGN_OR_RETURN(c->n_kv_heads, f.GetIntOr(p + ".attention.head_count_kv", c->n_heads));
  CASCADE_ASSIGN_OR_RETURN(c->context_length, f.GetIntOr(p + ".context_length", 2048));
  CASCADE_ASSIGN_OR_RETURN(c->norm_eps,
                           f.GetFloatOr(p + ".attention.layer_norm_rms_epsilon", 1e-5));
  CASCADE_ASSIGN_OR_RETURN(c->rope_theta, f.GetFloatOr(p + ".rope.freq_base", 10000.0));
  if (c->n_heads <= 0 || c->dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": GGUF metadata: head count and embedding length must be > 0"));
  }
  CASCADE_ASSIGN_OR_RETURN(c->head_dim,
                           f.GetIntOr(p + ".attention.key_length", c->dim / c->n_heads));
  CASCADE_ASSIGN_OR_RETURN(c->rope_dim, f.GetIntOr(p + ".rope.dimension_count", c->head_dim));
  // Vocabulary size: the explicit key, else the token list.
  auto vocab = f.GetInt(p + ".vocab_size");
  if (vocab.ok()) {
    c->vocab_size = *vocab;
  } else if (auto tokens = f.GetArray("tokenizer.ggml.tokens"); tokens.ok()) {
    c->vocab_size = static_cast<int64_t>((*tokens)->size);
  } else if (const auto* t = f.FindTensor("token_embd.weight")) {
    c->vocab_size = t->ne[1];
  }
  auto scaling = f.GetString(p + ".rope.scaling.type");
  if (scaling.ok() && *scaling == "linear") {
    c->rope_scaling.type = RopeScalingType::kLinear;
    CASCADE_ASSIGN_OR_RETURN(c->rope_scaling.factor, f.GetFloat(p + ".rope.scaling.factor"));
  } else if (scaling.ok() && *scaling != "none") {
    return absl::UnimplementedError(absl::StrCat(f.path(), ": GGUF metadata '", p,
                                                 ".rope.scaling.type' = '", *scaling,
                                                 "' is not supported (none, linear)"));
  }
  // Llama 3.1+ GGUF files carry the llama3 frequency divisors as a tensor.
  if (const auto* rf = f.FindTensor("rope_freqs.weight")) {
    if (rf->type != TensorType::kF32 || rf->n_dims != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.path(), ": tensor 'rope_freqs.weight' must be a 1-D F32 tensor"));
    }
    c->rope_freq_factors.resize(rf->ne[0]);
    std::memcpy(c->rope_freq_factors.data(), rf->data, rf->nbytes);
  }
  c->tied_embeddings = f.FindTensor("output.weight") == nullptr;
  return absl::OkStatus();
}

absl::Status ReadExpertsGguf(const GgufFile& f, std::string_view prefix_sv, bool norm_default,
                             ModelConfig* c) {
  const std::string p(prefix_sv);
  CASCADE_ASSIGN_OR_RETURN(c->n_experts, f.GetIntOr(p + ".expert_count", 0));
  if (c->n_experts == 0) return absl::OkStatus();
  CASCADE_ASSIGN_OR_RETURN(c->n_experts_used, f.GetInt(p + ".expert_used_count"));
  CASCADE_ASSIGN_OR_RETURN(c->expert_ffn_dim,
                           f.GetIntOr(p + ".expert_feed_forward_length", c->ffn_dim));
  CASCADE_ASSIGN_OR_RETURN(c->shared_expert_ffn_dim,
                           f.GetIntOr(p + ".expert_shared_feed_forward_length", 0));
  CASCADE_ASSIGN_OR_RETURN(c->expert_weights_norm,
                           f.GetBoolOr(p + ".expert_weights_norm", norm_default));
  return absl::OkStatus();
}

absl::Status ReadLlamaLikeHf(const nlohmann::json& j, const std::string& path, ModelConfig* c) {
  CASCADE_ASSIGN_OR_RETURN(c->n_layers, JsonInt(j, "num_hidden_layers", path));
  CASCADE_ASSIGN_OR_RETURN(c->dim, JsonInt(j, "hidden_size", path));
  CASCADE_ASSIGN_OR_RETURN(c->ffn_dim, JsonInt(j, "intermediate_size", path));
  CASCADE_ASSIGN_OR_RETURN(c->n_heads, JsonInt(j, "num_attention_heads", path));
  CASCADE_ASSIGN_OR_RETURN(c->n_kv_heads, JsonInt(j, "num_key_value_heads", path, c->n_heads));
  CASCADE_ASSIGN_OR_RETURN(c->vocab_size, JsonInt(j, "vocab_size", path));
  CASCADE_ASSIGN_OR_RETURN(c->context_length, JsonInt(j, "max_position_embeddings", path, 2048));
  CASCADE_ASSIGN_OR_RETURN(c->norm_eps, JsonFloat(j, "rms_norm_eps", path, 1e-6));
  CASCADE_ASSIGN_OR_RETURN(c->rope_theta, JsonFloat(j, "rope_theta", path, 10000.0));
  if (c->n_heads <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": config.json: num_attention_heads <= 0"));
  }
  CASCADE_ASSIGN_OR_RETURN(c->head_dim, JsonInt(j, "head_dim", path, c->dim / c->n_heads));
  c->rope_dim = c->head_dim;
  c->rope_layout = RopeLayout::kHalves;
  auto tie = j.find("tie_word_embeddings");
  c->tied_embeddings = tie != j.end() && tie->is_boolean() && tie->get<bool>();
  auto rs = j.find("rope_scaling");
  if (rs != j.end() && rs->is_object()) {
    std::string type;
    for (const char* k : {"rope_type", "type"}) {
      auto t = rs->find(k);
      if (t != rs->end() && t->is_string()) {
        type = t->get<std::string>();
        break;
      }
    }
    CASCADE_ASSIGN_OR_RETURN(c->rope_scaling.factor, JsonFloat(*rs, "factor", path, 1.0));
    if (type == "llama3") {
      c->rope_scaling.type = RopeScalingType::kLlama3;
      CASCADE_ASSIGN_OR_RETURN(c->rope_scaling.low_freq_factor,
                               JsonFloat(*rs, "low_freq_factor", path, 1.0));
      CASCADE_ASSIGN_OR_RETURN(c->rope_scaling.high_freq_factor,
                               JsonFloat(*rs, "high_freq_factor", path, 4.0));
      CASCADE_ASSIGN_OR_RETURN(c->rope_scaling.original_context,
                               JsonInt(*rs, "original_max_position_embeddings", path, 8192));
      if (c->rope_scaling.high_freq_factor <= c->rope_scaling.low_freq_factor) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": config.json: rope_scaling high_freq_factor must exceed low_freq_factor"));
      }
    } else if (type == "linear") {
      c->rope_scaling.type = RopeScalingType::kLinear;
    } else if (!type.empty() && type != "default") {
      return absl::UnimplementedError(absl::StrCat(path, ": config.json: rope_scaling type '", type,
                                                   "' is not supported (linear, llama3)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace cascade
