// The tensor layer's data types: a view of a tensor's bytes (TensorView) and how a
// rotary embedding pairs the dimensions it rotates (RopeLayout). Below model/ (which
// produces views from files) and kernels/ (which computes on them), so that neither has
// to know about the other.
//
// Contract: plain data, thread-compatible. A TensorView does not own its bytes: whoever
// made it (a model file mapping, a backend's device memory, a shard copy) keeps them alive
// while the view is used.
#ifndef CASCADE_TENSOR_TENSOR_H_
#define CASCADE_TENSOR_TENSOR_H_

#include <cstdint>
#include <string>

#include "tensor/tensor_type.h"

namespace cascade {

// How a weight's rows are laid out in memory. Views of files are always kRows; a backend
// may return another layout from UploadWeight for its own kernels (the CPU backend groups
// Q8_0 / Q4_0 rows 16 at a time where it has a kernel for that; kernels/cpu/row_groups.h).
// Only that backend reads such a view; rows(), cols(), nbytes and row_bytes() keep their
// meaning (the same bytes, in another order).
enum class WeightLayout {
  kRows,          // row after row, each row_bytes() long
  kRowGroups16,   // kernels/cpu/row_groups.h
};

struct TensorView {
  std::string name;  // canonical name
  TensorType type = TensorType::kF32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] = row length (contiguous)
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  WeightLayout layout = WeightLayout::kRows;

  int64_t cols() const { return ne[0]; }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
  uint64_t row_bytes() const { return nbytes / static_cast<uint64_t>(rows()); }
  std::string ShapeString() const;  // e.g. "[64, 512] F32"
};

// How the q/k projection rows pair up the dimensions that RoPE rotates together.
enum class RopeLayout {
  kAdjacentPairs,  // (2i, 2i+1): GGUF "llama" files (rows permuted by the converter)
  kHalves,         // (i, i + d/2): Hugging Face checkpoints, GGUF "qwen2"
};

}  // namespace cascade

#endif  // CASCADE_TENSOR_TENSOR_H_
