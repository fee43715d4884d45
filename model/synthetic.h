// Random-weight models of named shapes (TinyLlama-1.1B, Llama-3-8B, ...), written as GGUF,
// for benchmarks and tests: the same seed always gives the same file.
//
// Contract: WriteSyntheticModel streams one tensor at a time (memory stays at one tensor),
// quantizing each row to the requested type. Tokenizer metadata is copied from a GGUF
// vocabulary file when one is given (its vocabulary size must match the shape's). Errors
// name the shape, type or file.
#ifndef CASCADE_MODEL_SYNTHETIC_H_
#define CASCADE_MODEL_SYNTHETIC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/model_config.h"
#include "tensor/tensor_type.h"

namespace cascade {

struct ModelShape {
  std::string name;
  std::string arch = "llama";
  int64_t vocab = 32000, dim = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0;
  int64_t context = 2048;
  double rope_theta = 10000.0;
  bool tied = false;
  int64_t head_dim = 0;  // 0: dim / heads
  // A mixture of experts (arch qwen3moe): n_experts SwiGLU experts of expert_ffn, the
  // router's top experts_used per token; ffn is then unused.
  int64_t n_experts = 0, experts_used = 0, expert_ffn = 0;

  int64_t HeadDim() const { return head_dim > 0 ? head_dim : dim / heads; }
};

// Known shapes: "tinyllama-1.1b", "llama-110m", "llama-2-7b", "llama-3-8b", "mistral-7b",
// "smollm-135m", "qwen2-0.5b", "tiny" and "tiny-qwen2" (a few MB, for tests), and
// "qwen3-30b-a3b-4l": four layers of Qwen3-30B-A3B (128 experts of 768, 8 used, head_dim
// 128, q/k norms) over the 32000-token Llama vocabulary (Qwen's own is 151936; the head
// is then 5x smaller than the real model's), for benchmarks of the expert layers.
std::optional<ModelShape> FindModelShape(const std::string& name);
std::vector<std::string> ModelShapeNames();

struct SyntheticOptions {
  TensorType type = TensorType::kF16;  // matrices; norms stay F32
  uint64_t seed = 1;
  std::string tokenizer_gguf;  // copy tokenizer.* keys from this file ("" = none)
};

absl::Status WriteSyntheticModel(const ModelShape& shape, const SyntheticOptions& options,
                                 const std::string& path);

}  // namespace cascade

#endif  // CASCADE_MODEL_SYNTHETIC_H_
