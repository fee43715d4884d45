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
};

// Known shapes: "tinyllama-1.1b", "llama-110m", "llama-2-7b", "llama-3-8b", "mistral-7b",
// "smollm-135m", "qwen2-0.5b", "tiny" and "tiny-qwen2" (a few MB, for tests).
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
