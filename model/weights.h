// ModelWeights: the tensors one pipeline stage needs, looked up by canonical name and
// checked against the shapes the ModelConfig implies.
//
// Contract:
// - Bind(source, range) binds layers [first, last) plus the token embedding when the range
//   starts at layer 0 and the final norm and output head when it ends at the last layer.
//   A missing tensor, a wrong shape, or a matmul weight of a type the kernels cannot use is
//   an error naming the tensor, what was found and what was expected.
// - Norm weights and biases are converted to F32 copies owned here (they are tiny); large
//   matrices stay in the source's mapping. The ModelSource must outlive the ModelWeights.
// - Immutable after Bind; thread-safe to read.
#ifndef CASCADE_MODEL_WEIGHTS_H_
#define CASCADE_MODEL_WEIGHTS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_source.h"

namespace cascade {

struct LayerRange {
  int first = 0;  // inclusive
  int last = 0;   // exclusive
  int size() const { return last - first; }
};

struct LayerWeights {
  std::vector<float> attn_norm;        // (dim)
  const TensorView* wq = nullptr;      // (q_dim rows, dim cols)
  const TensorView* wk = nullptr;      // (kv_dim, dim)
  const TensorView* wv = nullptr;      // (kv_dim, dim)
  const TensorView* wo = nullptr;      // (dim, q_dim)
  std::vector<float> bq, bk, bv;       // (q_dim), (kv_dim), (kv_dim); empty without biases
  std::vector<float> ffn_norm;         // (dim)
  const TensorView* w_gate = nullptr;  // (ffn, dim)
  const TensorView* w_up = nullptr;    // (ffn, dim)
  const TensorView* w_down = nullptr;  // (dim, ffn)
};

struct ModelWeights {
  LayerRange range;
  bool has_embedding = false;              // first stage
  bool has_head = false;                   // last stage
  const TensorView* token_embd = nullptr;  // (vocab rows, dim cols)
  std::vector<float> output_norm;          // (dim)
  const TensorView* output = nullptr;      // (vocab, dim); token_embd when tied
  std::vector<LayerWeights> layers;        // layers[i] is layer range.first + i

  static absl::StatusOr<std::unique_ptr<ModelWeights>> Bind(const ModelSource& source,
                                                            LayerRange range);
  // Bytes of the matrices this stage reads per token (for memory plans and benchmarks).
  uint64_t matrix_bytes() const;
};

}  // namespace cascade

#endif  // CASCADE_MODEL_WEIGHTS_H_
