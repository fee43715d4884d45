// Hyperparameters of a decoder-only transformer, independent of the file format.
//
// Contract: a ModelConfig is plain data filled by an architecture parser (model/arch/*)
// from GGUF metadata or a Hugging Face config.json; Validate() checks every field against
// sane bounds and the relations between fields before any memory is sized from them.
#ifndef CASCADE_MODEL_MODEL_CONFIG_H_
#define CASCADE_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tensor/tensor.h"

namespace cascade {

// kLongRope: Phi-3's LongRoPE (llama.cpp "su"/"longrope"): per-frequency factors, the long
// ones when the context served (the model's context_length) exceeds original_context and
// the short ones otherwise, and attn_factor on the rotated dimensions of q and k.
enum class RopeScalingType { kNone, kLinear, kLlama3, kLongRope };

// The FFN's gate activation: down(act(gate x) * up x).
enum class FfnActivation { kSilu, kGeluTanh };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_context = 0;   // llama3, LongRoPE
  // LongRoPE: rope_dim / 2 divisors of each pair's frequency for either context, and the
  // factor on cos and sin (so on the rotated part of q . k, squared).
  std::vector<float> long_factors;
  std::vector<float> short_factors;
  double attn_factor = 1.0;
};

struct ModelConfig {
  std::string arch;  // "llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "qwen2moe", "qwen3moe"
  std::string name;
  int64_t vocab_size = 0;
  int64_t dim = 0;  // hidden size
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn_dim = 0;
  int64_t context_length = 0;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int64_t rope_dim = 0;  // rotated dimensions per head (<= head_dim)
  RopeLayout rope_layout = RopeLayout::kAdjacentPairs;
  RopeScaling rope_scaling;
  // Per-frequency divisors (rope_dim / 2 entries) from a GGUF rope_freqs tensor or derived
  // from llama3 scaling; empty means all 1.
  std::vector<float> rope_freq_factors;
  bool tied_embeddings = false;
  bool qkv_bias = false;
  // Qwen3: a per-head RMSNorm of q and of k (attn_q_norm / attn_k_norm, head_dim each)
  // after the projections, before RoPE.
  bool qk_norm = false;
  // Phi-3: q, k and v stored as one attn_qkv (q rows, then k, then v) and gate and up as
  // one ffn_up (gate rows, then up rows).
  bool fused_projections = false;
  // Sliding-window attention: a layer l with l % sliding_window_period == 0 attends to its
  // last sliding_window positions (itself included); 0: every layer attends to all.
  int64_t sliding_window = 0;
  int64_t sliding_window_period = 1;
  // Gemma 3: > 0: layer l attends to all when (l + 1) % global_layer_every == 0 and to the
  // window otherwise (instead of sliding_window_period's rule).
  int64_t global_layer_every = 0;
  // Gemma 3: > 0: the windowed layers rotate with this base and no rope scaling (the others
  // with rope_theta and rope_scaling).
  double rope_theta_local = 0;
  // Gemma 2: the embeddings times sqrt(dim); RMSNorms of the attention's and the FFN's
  // outputs (post_attention_norm, post_ffw_norm) before each residual add; soft-caps
  // cap * tanh(x / cap) of the attention scores and of the logits (0: none).
  bool scale_embeddings = false;
  bool post_norms = false;
  FfnActivation ffn_activation = FfnActivation::kSilu;
  double attn_softcap = 0;
  double final_softcap = 0;
  // The attention scores' scale; 0: 1 / sqrt(head_dim).
  double attn_scale = 0;
  // Added to every RMSNorm weight as it is loaded: 1 for Hugging Face Gemma checkpoints,
  // which store w for x * (1 + w) (GGUF files hold 1 + w already).
  double norm_weight_offset = 0;
  // Mixture of experts (Mixtral, Qwen2-MoE): each layer's FFN is n_experts routed experts
  // of expert_ffn_dim (ffn_{gate,up,down}_exps); a router (ffn_gate_inp) softmax over them
  // picks the n_experts_used largest per token, their probabilities renormalised to sum to
  // 1 when expert_weights_norm. A shared expert of shared_expert_ffn_dim (0: none), gated
  // by sigmoid(ffn_gate_inp_shexp . h), is added to every token. 0 experts: a dense FFN.
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  int64_t expert_ffn_dim = 0;
  bool expert_weights_norm = false;
  int64_t shared_expert_ffn_dim = 0;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t gqa_group() const { return n_kv_heads > 0 ? n_heads / n_kv_heads : 0; }
  bool is_moe() const { return n_experts > 0; }
  // The widest FFN a token passes through: the dense FFN, an expert or the shared expert.
  int64_t max_ffn_dim() const;

  // The window layer `layer` attends over (positions), 0 for the whole context.
  int64_t WindowOf(int64_t layer) const {
    if (sliding_window <= 0) return 0;
    if (global_layer_every > 0) return (layer + 1) % global_layer_every != 0 ? sliding_window : 0;
    return layer % sliding_window_period == 0 ? sliding_window : 0;
  }
  // Whether `layer` rotates with rope_theta_local (a windowed layer of a model that has one).
  bool UsesLocalRope(int64_t layer) const { return rope_theta_local > 0 && WindowOf(layer) > 0; }
  // The factor on q . k: attn_scale, or 1 / sqrt(head_dim).
  float AttentionScale() const;

  // `source` names the file in errors.
  absl::Status Validate(const std::string& source) const;
  // Frequency of each rotated pair i (theta_i = pos * freq[i]) with scaling applied.
  std::vector<float> RopeFrequencies() const;
  // The frequencies of the layers UsesLocalRope names: base rope_theta_local, unscaled.
  std::vector<float> LocalRopeFrequencies() const;
  // The factor on the rotated dimensions of q and of k after RoPE: LongRoPE's attention
  // factor, else 1.
  float RopeMagnitude() const;
  // Parameter count (weights only, tied embeddings counted once): every expert, all of
  // which are resident.
  int64_t ParameterCount() const;
  // The parameters one token's forward pass uses: n_experts_used of the routed experts
  // (ParameterCount() for a dense model).
  int64_t ActiveParameterCount() const;
};

}  // namespace cascade

#endif  // CASCADE_MODEL_MODEL_CONFIG_H_
