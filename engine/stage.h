// Stage: the forward pass over a contiguous range of transformer layers, the unit a
// pipeline stage runs. The first stage embeds token ids; the last one applies the final
// norm and the output head; a middle stage maps activations to activations. The whole
// model in one process is a Stage over [0, n_layers).
//
// Contract:
// - Forward() validates the whole batch (sizes, token ids, positions, KV capacity) before
//   it changes anything; a bad batch returns InvalidArgument / ResourceExhausted and the
//   stage is left as it was.
// - Results are batch-invariant (see kernels/backend.h): a sequence's activations and
//   logits do not depend on the other slots of the batch.
// - Create refuses (Unimplemented, naming it) a model that needs a BackendFeature its
//   backend lacks (sliding windows, soft-caps, GeluMul, mixtures of experts, ...:
//   model/model_config.h), rather than compute it wrongly.
// - Mixture of experts (engine/ffn.cc): a batch's tokens are grouped per expert, so each
//   used expert's weights are read once per batch; a token's experts, weights and the
//   order its expert outputs are summed in (expert index) depend on that token alone.
// - Tensor parallelism (StageOptions::tp): the stage is one rank of a group that splits
//   every layer Megatron-style (model/tensor_parallel.h): it binds only its rank's slices,
//   keeps the KV cache of its KV heads, and joins an all-reduce after the attention output
//   and after the FFN down projection (and after the first stage's embedding, which is
//   split by vocabulary), and an all-gather of the logits, which the head computes for
//   its vocabulary slice. Every rank of the group must call Forward and FreeSequence with
//   the same arguments in the same order (worker/tp_group.h sees to it); each rank's
//   output is the whole result (hidden states or all the logits). The all-reduce sums in
//   rank order, so a fixed group size keeps batch invariance; results differ from the
//   unsplit stage only by that summation order. The activation buffers are allocated at
//   Create for max_batch_tokens, so that no rank can fail a batch the others run. A
//   collective that fails leaves the stage broken: that Forward and every later one
//   returns the error.
// - Not thread-safe: one executor thread drives a Stage. The ModelSource must outlive it,
//   and so must the Collective.
#ifndef CASCADE_ENGINE_STAGE_H_
#define CASCADE_ENGINE_STAGE_H_

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv_cache.h"
#include "engine/moe_routing.h"
#include "generation/batch.h"
#include "kernels/backend.h"
#include "model/model_source.h"
#include "model/weights.h"
#include "parallel/collective.h"

namespace cascade {

struct StageOptions {
  LayerRange layers;  // empty (0, 0) means the whole model
  int threads = 1;
  bool quantized_activations = true;
  int kv_block_size = kDefaultKvBlockSize;
  int64_t kv_blocks = 0;  // 0: enough for kv_sequences full-context sequences
  int kv_sequences = 1;
  // The KV cache's element type: F32, or F16 (half the memory and half the bytes attention
  // reads; keys and values rounded to nearest even when stored).
  TensorType kv_type = TensorType::kF32;
  bool kv_resident = false;  // KvCacheOptions::resident
  int64_t max_batch_tokens = kDefaultMaxBatchTokens;
  // This stage's rank of a tensor-parallel group (rank tp->rank() of tp->size()); null: the
  // whole stage in this process. Its memory kind must be the backend's.
  Collective* tp = nullptr;
};

class Stage {
 public:
  // Binds the weights of the layer range and allocates the KV cache. `backend` may be
  // null: a CpuBackend with options.threads threads is created.
  static absl::StatusOr<std::unique_ptr<Stage>> Create(const ModelSource& source,
                                                       const StageOptions& options,
                                                       std::unique_ptr<Backend> backend = nullptr);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return *weights_; }
  LayerRange layers() const { return weights_->range; }
  bool is_first() const { return weights_->has_embedding; }
  bool is_last() const { return weights_->has_head; }
  Backend& backend() { return *backend_; }
  KvCache& kv_cache() { return *kv_; }
  const StageOptions& options() const { return options_; }
  // This rank's part of a tensor-parallel stage; null for a whole stage.
  const TpShard* shard() const { return weights_->shard ? &*weights_->shard : nullptr; }

  // Runs the stage.
  //   in:  the first stage reads slots[i].token; other stages read `hidden_in`
  //        (n_slots, dim).
  //   out: the last stage writes logits (slots with want_logits, in slot order, vocab)
  //        to *out; other stages write hidden states (n_slots, dim).
  absl::Status Forward(std::span<const TokenSlot> slots, std::span<const float> hidden_in,
                       std::vector<float>* out);

  // Drops a sequence's KV blocks.
  void FreeSequence(SeqId seq) { kv_->Free(seq); }

 private:
  Stage() = default;
  absl::Status Validate(std::span<const TokenSlot> slots, std::span<const float> hidden_in) const;
  absl::Status Layer(int local_layer, std::span<const TokenSlot> slots, const KvCache::Plan& plan);
  absl::Status AttentionBlock(int local_layer, std::span<const TokenSlot> slots,
                              const KvCache::Plan& plan);
  absl::Status FfnBlock(int local_layer, int64_t n);
  // The FFN of a mixture-of-experts layer (engine/ffn.cc), into xb_.
  absl::Status MoeBlock(int local_layer, int64_t n);
  // out (n, dim) = down(act(gate in) * up in), in (n, dim), hidden size `ffn`, through
  // hb_ and hb2_.
  // gate = act(gate) * up over `count` elements, act the model's (SiLU or GELU-tanh).
  void GateTimesUp(float* gate, const float* up, int64_t count);
  void Ffn(const TensorView& gate, const TensorView& up, const TensorView& down, const float* in,
           int64_t n, int64_t ffn, float* out);
  // x += post_norm(xb) for n rows (xb all-reduced first when split; no norm when
  // post_norm is empty).
  absl::Status AddResidual(const DeviceBuffer& post_norm, int64_t n);
  // Multiplies the rotated dimensions (the first rope_dim) of each of `rows` heads of
  // head_dim at x by `factor`.
  void ScaleRotated(float* x, int64_t rows, float factor);
  void Embed(std::span<const TokenSlot> slots, float* x);
  absl::Status Head(const std::vector<int64_t>& logit_rows, std::vector<float>* out);
  // The tensor-parallel all-reduce of (n, dim) partial sums; a failure breaks the stage.
  absl::Status ReduceAcrossRanks(float* data, int64_t count);

  // The sizes this rank computes: the model's, or its shard's.
  struct LocalDims {
    int64_t n_heads = 0, n_kv_heads = 0, q_dim = 0, kv_dim = 0, ffn = 0;
  };

  // A layer's weights as the backend uses them (device-resident for a GPU).
  struct ResidentLayer {
    TensorView wq, wk, wv, wo, w_gate, w_up, w_down;
    // Mixture of experts (model/weights.h): empty views where the model has none.
    TensorView router, shexp_gate, shexp_up, shexp_down, shexp_router;
    std::vector<TensorView> exp_gate, exp_up, exp_down;
    // F32 vectors; those a model lacks are empty.
    DeviceBuffer attn_norm, ffn_norm, bq, bk, bv, q_norm, k_norm, post_attn_norm, post_ffn_norm;
  };

  absl::StatusOr<DeviceBuffer> UploadVector(const std::vector<float>& v);
  // A matrix as the backend uses it (an empty view for null); *all_copied turns false when
  // the backend uses the host bytes in place.
  absl::StatusOr<TensorView> UploadMatrix(const TensorView* host, bool* all_copied);
  absl::StatusOr<ResidentLayer> UploadLayer(const LayerWeights& lw, bool* all_copied);
  absl::Status EnsureCapacity(int64_t n, int64_t n_logits);

  StageOptions options_;
  ModelConfig config_;
  LocalDims local_;
  Collective* tp_ = nullptr;
  // Tensor parallelism: every rank's vocabulary slice and the widest one (the logits each
  // rank contributes to the all-gather, padded to it).
  std::vector<std::pair<int64_t, int64_t>> vocab_slices_;
  int64_t vocab_stride_ = 0;
  absl::Status broken_;
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvCache> kv_;
  std::vector<float> rope_freq_;        // (rope_dim / 2), host
  std::vector<float> rope_freq_local_;  // the same for the layers of UsesLocalRope
  std::vector<ResidentLayer> layers_;
  TensorView token_embd_, output_;
  DeviceBuffer output_norm_;

  // Activations on the backend's device, grown on demand. Shapes for n tokens:
  int64_t capacity_ = 0;         // tokens the buffers hold
  int64_t logits_capacity_ = 0;  // rows of logits
  DeviceBuffer x_;               // (n, dim) residual stream
  DeviceBuffer xb_;              // (n + 1, dim) normed input / projections (+ a zero row)
  DeviceBuffer q_;               // (n, q_dim)
  DeviceBuffer k_;               // (n, kv_dim)
  DeviceBuffer v_;               // (n, kv_dim)
  DeviceBuffer att_;             // (n, q_dim)
  DeviceBuffer hb_;              // (n, ffn)
  DeviceBuffer hb2_;             // (n, ffn)
  DeviceBuffer router_;          // MoE: (n, n_experts) router logits, (n) shared-expert gate
  DeviceBuffer moe_in_;          // MoE: (n, dim) one expert's gathered inputs
  DeviceBuffer moe_out_;         // MoE: (n, dim) one expert's outputs
  std::vector<float> moe_host_;  // MoE, host: router logits, then an expert's outputs
  std::vector<float> moe_sum_;   // MoE, host: (n, dim) the weighted sum of expert outputs
  // MoE, a one-token step: the routed local experts, their gate and up views, and outputs
  // (kept so that a decode step allocates nothing).
  std::vector<int64_t> moe_used_;
  std::vector<const TensorView*> moe_gate_up_;
  std::vector<float*> moe_gate_up_out_;
  ExpertRouting routing_;
  DeviceBuffer logits_;          // (m, vocab) or, split by vocabulary, (m, vocab_stride_)
  DeviceBuffer gathered_;        // TP: (size, m, vocab_stride_), every rank's logits
  std::vector<float> host_gathered_;
  std::vector<float> zero_row_;  // (dim) zeros, host
  std::vector<int32_t> pos_;     // (n), host
};

}  // namespace cascade

#endif  // CASCADE_ENGINE_STAGE_H_
