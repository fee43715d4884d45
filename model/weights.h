// ModelWeights: the tensors one pipeline stage needs, looked up by canonical name and
// checked against the shapes the ModelConfig implies.
//
// Contract:
// - Bind(source, range) binds layers [first, last) plus the token embedding when the range
//   starts at layer 0 and the final norm and output head when it ends at the last layer.
//   A missing tensor, a wrong shape, or a matmul weight of a type the kernels cannot use is
//   an error naming the tensor, what was found and what was expected. Fused projections
//   (ModelConfig::fused_projections: attn_qkv, ffn_up holding gate and up) are bound as row
//   views of the fused tensor, so everything after Bind sees separate wq/wk/wv, w_gate/w_up.
//   A mixture-of-experts layer (ModelConfig::is_moe) binds the router and one view per
//   expert of each 3-D ffn_{gate,up,down}_exps tensor (plus the shared expert when the
//   model has one); its dense w_gate/w_up/w_down are then null.
// - Norm weights and biases are converted to F32 copies owned here (they are tiny); large
//   matrices are views of the source's mapping (a backend may copy them: see
//   Backend::UploadWeight). The ModelSource must outlive the ModelWeights.
// - With a TpShard (model/tensor_parallel.h) only that rank's part of each matrix and bias
//   is bound: row slices are views of the mapping, column slices and gathered KV rows are
//   copies owned here. Shapes are then the local ones (e.g. wq is (heads_here * head_dim,
//   dim)); the embedding and the head hold the shard's vocabulary rows.
// - Immutable after Bind; thread-safe to read.
#ifndef CASCADE_MODEL_WEIGHTS_H_
#define CASCADE_MODEL_WEIGHTS_H_

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_source.h"
#include "model/tensor_parallel.h"

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
  std::vector<float> q_norm, k_norm;   // (head_dim) each, ModelConfig::qk_norm; else empty
  std::vector<float> post_attn_norm;   // (dim), ModelConfig::post_norms; else empty
  std::vector<float> ffn_norm;         // (dim)
  const TensorView* w_gate = nullptr;  // (ffn, dim)
  const TensorView* w_up = nullptr;    // (ffn, dim)
  const TensorView* w_down = nullptr;  // (dim, ffn)
  std::vector<float> post_ffn_norm;    // (dim), ModelConfig::post_norms; else empty
  // Mixture of experts (ModelConfig::is_moe), else null / empty:
  const TensorView* router = nullptr;        // ffn_gate_inp (n_experts, dim)
  std::vector<const TensorView*> exp_gate;   // per expert (expert_ffn, dim)
  std::vector<const TensorView*> exp_up;     // per expert (expert_ffn, dim)
  std::vector<const TensorView*> exp_down;   // per expert (dim, expert_ffn)
  const TensorView* shexp_gate = nullptr;    // (shared_ffn, dim)
  const TensorView* shexp_up = nullptr;      // (shared_ffn, dim)
  const TensorView* shexp_down = nullptr;    // (dim, shared_ffn)
  const TensorView* shexp_router = nullptr;  // ffn_gate_inp_shexp (1, dim)

  // Every matrix of the layer (the experts included), for byte counts.
  std::vector<const TensorView*> Matrices() const;
};

struct ModelWeights {
  LayerRange range;
  bool has_embedding = false;              // first stage
  bool has_head = false;                   // last stage
  const TensorView* token_embd = nullptr;  // (vocab rows, dim cols)
  std::vector<float> output_norm;          // (dim)
  const TensorView* output = nullptr;      // (vocab, dim); token_embd when tied
  std::vector<LayerWeights> layers;        // layers[i] is layer range.first + i

  std::optional<TpShard> shard;            // set when bound for one rank of a TP group

  static absl::StatusOr<std::unique_ptr<ModelWeights>> Bind(const ModelSource& source,
                                                            LayerRange range,
                                                            const TpShard* shard = nullptr);
  // Bytes of the matrices this stage holds (every expert of a mixture of experts), for
  // memory plans and benchmarks.
  uint64_t matrix_bytes() const;

  // Frees the tensor-parallel parts made here, once a backend holds copies of them: their
  // views keep name, type and shape (matrix_bytes() still counts them), with data null.
  void ReleaseOwnedBytes();

  // The tensor-parallel parts made here (views of them are above).
  std::vector<std::unique_ptr<TensorView>> owned_views;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> owned_bytes;
};

}  // namespace cascade

#endif  // CASCADE_MODEL_WEIGHTS_H_
