#include "model/memory.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace cascade {

uint64_t KvBytesPerToken(const ModelConfig& c, int layers, TensorType kv_type) {
  return 2ull * KvElementBytes(kv_type) * static_cast<uint64_t>(layers) *
         static_cast<uint64_t>(c.kv_dim());
}

namespace {

// Stage weight bytes; with `active`, each stacked expert tensor counts n_experts_used of
// its n_experts matrices.
uint64_t WeightBytes(const ModelSource& source, LayerRange range, bool active) {
  const ModelConfig& c = source.config();
  auto share = [&](const std::string& n, uint64_t bytes) {
    const bool experts = n.size() > 12 && n.compare(n.size() - 12, 12, "_exps.weight") == 0;
    if (!active || !experts || c.n_experts <= 0) return bytes;
    return bytes / static_cast<uint64_t>(c.n_experts) * static_cast<uint64_t>(c.n_experts_used);
  };
  uint64_t total = 0;
  for (const TensorView& t : source.tensors()) {
    const std::string& n = t.name;
    if (n.rfind("blk.", 0) == 0) {
      const int layer = std::atoi(n.c_str() + 4);
      if (layer >= range.first && layer < range.last) total += share(n, t.nbytes);
    } else if (n == "token_embd.weight") {
      const bool head_uses_it = range.last == c.n_layers && c.tied_embeddings;
      if (range.first == 0 || head_uses_it) total += t.nbytes;
    } else if (n == "output.weight" || n == "output_norm.weight") {
      if (range.last == c.n_layers) total += t.nbytes;
    }
  }
  return total;
}

}  // namespace

uint64_t StageWeightBytes(const ModelSource& source, LayerRange range) {
  return WeightBytes(source, range, /*active=*/false);
}

uint64_t StageActiveWeightBytes(const ModelSource& source, LayerRange range) {
  return WeightBytes(source, range, /*active=*/true);
}

StageMemory EstimateStageMemory(const ModelConfig& c, LayerRange range, uint64_t weight_bytes,
                                int64_t kv_tokens, int64_t batch_tokens, const TpShard* shard,
                                TensorType kv_type) {
  StageMemory m;
  m.weights = weight_bytes;
  const int64_t q = shard ? shard->n_heads() * c.head_dim : c.q_dim();
  const int64_t kv = shard ? shard->n_kv_heads() * c.head_dim : c.kv_dim();
  const int64_t ffn = shard && !c.is_moe() ? shard->ffn() : c.max_ffn_dim();
  m.kv_cache = 2ull * KvElementBytes(kv_type) * static_cast<uint64_t>(range.size()) *
               static_cast<uint64_t>(kv) * static_cast<uint64_t>(kv_tokens);
  // Per token: x, xb (dim), q, att (q_dim), k, v (kv_dim), two FFN buffers; the last stage
  // adds a row of logits and the activation-quantization scratch is at most one more row.
  // A rank of a split stage computes its slice of the logits and gathers the whole row.
  uint64_t per_token = 2 * c.dim + 2 * q + 2 * kv + 2 * ffn + ffn;
  // A mixture of experts: the router's logits, an expert's inputs and outputs (device),
  // the router's logits or an expert's outputs and the weighted sum (host).
  if (c.is_moe()) per_token += 2 * c.n_experts + 4 * c.dim;
  if (range.last == c.n_layers) per_token += shard ? shard->vocab() + c.vocab_size : c.vocab_size;
  m.activations = per_token * sizeof(float) * static_cast<uint64_t>(batch_tokens);
  return m;
}

}  // namespace cascade
