// ModelSource: a model on disk, either one GGUF file or a Hugging Face folder
// (config.json + model.safetensors or sharded model-*.safetensors with
// model.safetensors.index.json), presented uniformly: a validated ModelConfig and the
// tensors under canonical (GGUF-style) names, e.g. "blk.3.attn_q.weight".
//
// Contract:
// - Open() maps the files read-only; tensor data is not copied except for the rare
//   tensor whose data is not aligned to its element size (copied once into an owned,
//   aligned buffer). Errors name the file and what is wrong with it.
// - Immutable after Open; thread-safe to read; TensorView data pointers are valid while
//   the ModelSource lives.
#ifndef CASCADE_MODEL_MODEL_SOURCE_H_
#define CASCADE_MODEL_MODEL_SOURCE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "tensor/tensor.h"

namespace cascade {

class ModelSource {
 public:
  static absl::StatusOr<std::unique_ptr<ModelSource>> Open(const std::string& path);

  const std::string& path() const { return path_; }
  std::string_view format() const { return gguf_ ? "gguf" : "safetensors"; }
  const ModelConfig& config() const { return config_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* Find(std::string_view canonical_name) const;
  // The GGUF file, or null for a Hugging Face folder.
  const GgufFile* gguf() const { return gguf_.get(); }
  // The folder of a Hugging Face model ("" for GGUF).
  const std::string& hf_dir() const { return hf_dir_; }
  uint64_t weight_bytes() const;
  // Asks the OS to read the mapped files ahead.
  void Prefetch() const;

 private:
  ModelSource() = default;
  absl::Status OpenGguf(const std::string& path);
  absl::Status OpenHf(const std::string& dir);
  absl::Status AddTensor(TensorView view);

  std::string path_;
  std::string hf_dir_;
  ModelConfig config_;
  std::unique_ptr<GgufFile> gguf_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<std::unique_ptr<uint8_t[]>> owned_;  // realigned copies
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

// Maps a Hugging Face tensor name to its canonical name ("" if not a weight the engine
// uses, e.g. rotary_emb.inv_freq): the Llama map (also Qwen2/3, Phi-3), or for a layer's
// tensor first `leaf_overrides` ({hf leaf, canonical leaf}: ArchSpec::hf_leaf_names).
std::string CanonicalTensorName(
    std::string_view hf_name,
    std::span<const std::pair<std::string_view, std::string_view>> leaf_overrides = {});

}  // namespace cascade

#endif  // CASCADE_MODEL_MODEL_SOURCE_H_
