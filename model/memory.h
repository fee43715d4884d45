// Memory needed by a pipeline stage: weights of its layers, its KV cache and its
// activation/workspace buffers. Used by `cascade inspect`, the planner and the worker
// (which sizes its KV cache from what is left).
//
// Contract: pure arithmetic on a ModelConfig; thread-safe.
#ifndef CASCADE_MODEL_MEMORY_H_
#define CASCADE_MODEL_MEMORY_H_

#include <cstdint>
#include <string>

#include "model/model_config.h"
#include "model/model_source.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"
#include "util/units.h"

namespace cascade {

struct StageMemory {
  uint64_t weights = 0;      // bytes of this stage's tensors as stored
  uint64_t kv_cache = 0;     // bytes for kv_tokens positions (all sequences together)
  uint64_t activations = 0;  // workspace for a batch of batch_tokens tokens
  uint64_t total() const { return weights + kv_cache + activations; }
};

// KV bytes per token position for `layers` layers, keys and values of kv_type (F32 or F16).
uint64_t KvBytesPerToken(const ModelConfig& c, int layers, TensorType kv_type);

// Weight bytes of layers [range) plus embedding (first stage) and head (last stage), from
// the actual tensors of `source`: every expert of a mixture of experts (all are resident).
uint64_t StageWeightBytes(const ModelSource& source, LayerRange range);
// The part of those a token's forward pass reads: n_experts_used of n_experts of each
// stacked expert tensor (ffn_*_exps); StageWeightBytes for a dense model.
uint64_t StageActiveWeightBytes(const ModelSource& source, LayerRange range);

// With a shard: one rank of a tensor-parallel stage (its KV heads, its activation sizes,
// its slice of the logits and the gathered whole); `weight_bytes` is then the rank's. The
// KV cache holds elements of kv_type (F32 or F16).
StageMemory EstimateStageMemory(const ModelConfig& c, LayerRange range, uint64_t weight_bytes,
                                int64_t kv_tokens, int64_t batch_tokens,
                                const TpShard* shard = nullptr,
                                TensorType kv_type = TensorType::kF32);

}  // namespace cascade

#endif  // CASCADE_MODEL_MEMORY_H_
