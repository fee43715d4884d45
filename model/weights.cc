#include "model/weights.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "util/fp16.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

class Binder {
 public:
  explicit Binder(const ModelSource& src) : src_(src) {}

  absl::StatusOr<const TensorView*> Matrix(const std::string& name, int64_t cols, int64_t rows) {
    return Stack(name, cols, rows, 0);
  }

  // A matrix (`count` 0) or a 3-D stack of `count` matrices (experts), GGUF ne order.
  absl::StatusOr<const TensorView*> Stack(const std::string& name, int64_t cols, int64_t rows,
                                          int64_t count) {
    const TensorView* t = src_.Find(name);
    if (t == nullptr) return Missing(name);
    // A one-row matrix may be stored as a vector (llama.cpp's loader takes both; Qwen2-MoE's
    // shared-expert gate is one).
    const int dims = count > 0 ? 3 : (rows == 1 && t->n_dims == 1 ? 1 : 2);
    if (t->n_dims != dims || t->ne[0] != cols || (dims > 1 && t->ne[1] != rows) ||
        (count > 0 && t->ne[2] != count)) {
      return WrongShape(*t, count > 0 ? absl::StrCat("[", cols, ", ", rows, ", ", count, "]")
                                      : absl::StrCat("[", cols, ", ", rows, "]"));
    }
    if (!IsComputeSupported(t->type)) {
      return absl::UnimplementedError(
          absl::StrCat(src_.path(), ": tensor '", name, "' has type ", TensorTypeName(t->type),
                       ", which the kernels do not support (F32, F16, BF16, Q8_0, Q4_0, "
                       "Q4_K, Q5_K, Q6_K)"));
    }
    return t;
  }

  // An RMSNorm weight: a required Vector plus ModelConfig::norm_weight_offset.
  absl::Status Norm(const std::string& name, int64_t n, std::vector<float>* out) {
    CASCADE_RETURN_IF_ERROR(Vector(name, n, false, out));
    const float offset = static_cast<float>(src_.config().norm_weight_offset);
    if (offset != 0) {
      for (float& v : *out) v += offset;
    }
    return absl::OkStatus();
  }

  // A 1-D vector converted to F32. Missing is an error unless `optional`.
  absl::Status Vector(const std::string& name, int64_t n, bool optional, std::vector<float>* out) {
    const TensorView* t = src_.Find(name);
    if (t == nullptr) return optional ? absl::OkStatus() : Missing(name);
    if (t->n_dims != 1 || t->ne[0] != n) return WrongShape(*t, absl::StrCat("[", n, "]"));
    out->resize(n);
    switch (t->type) {
      case TensorType::kF32:
        std::memcpy(out->data(), t->data, n * sizeof(float));
        return absl::OkStatus();
      case TensorType::kF16:
      case TensorType::kBF16:
        for (int64_t i = 0; i < n; ++i) {
          uint16_t h;
          std::memcpy(&h, t->data + 2 * i, 2);
          (*out)[i] = t->type == TensorType::kF16 ? Fp16ToFloat(h) : Bf16ToFloat(h);
        }
        return absl::OkStatus();
      default:
        return absl::InvalidArgumentError(absl::StrCat(src_.path(), ": tensor '", name,
                                                       "' has type ", TensorTypeName(t->type),
                                                       "; norms and biases must be F32/F16/BF16"));
    }
  }

 private:
  absl::Status Missing(const std::string& name) const {
    return absl::NotFoundError(absl::StrCat(src_.path(), ": tensor '", name, "' is missing"));
  }
  absl::Status WrongShape(const TensorView& t, const std::string& want) const {
    return absl::InvalidArgumentError(absl::StrCat(
        src_.path(), ": tensor '", t.name, "' has shape ", t.ShapeString(), ", expected ", want));
  }
  const ModelSource& src_;
};

}  // namespace

namespace {

// A view made here, kept alive by the ModelWeights.
const TensorView* Keep(ModelWeights* w, TensorView v) {
  w->owned_views.push_back(std::make_unique<TensorView>(std::move(v)));
  return w->owned_views.back().get();
}

// Narrows the bound weights to one rank's part (model/tensor_parallel.h).
absl::Status ApplyShard(const ModelConfig& c, const TpShard& s, ModelWeights* w) {
  auto keep = [w](TensorView v) { return Keep(w, std::move(v)); };
  auto storage = [w]() {
    w->owned_bytes.push_back(std::make_unique<std::vector<uint8_t>>());
    return w->owned_bytes.back().get();
  };
  auto slice = [](std::vector<float>* v, int64_t first, int64_t count) {
    if (v->empty()) return;
    *v = std::vector<float>(v->begin() + first, v->begin() + first + count);
  };
  auto gather = [&s](std::vector<float>* v, int64_t group) {
    if (v->empty()) return;
    std::vector<float> out;
    for (int64_t k : s.kv_heads)
      out.insert(out.end(), v->begin() + k * group, v->begin() + (k + 1) * group);
    *v = std::move(out);
  };
  const int64_t hd = c.head_dim;
  const int64_t q0 = s.head_begin * hd, nq = s.n_heads() * hd;
  for (LayerWeights& l : w->layers) {
    l.wq = keep(SliceRows(*l.wq, q0, nq));
    for (const TensorView** kv : {&l.wk, &l.wv}) {
      *kv = keep(s.kv_contiguous() ? SliceRows(**kv, s.kv_heads[0] * hd, s.n_kv_heads() * hd)
                                   : GatherRowGroups(**kv, s.kv_heads, hd, storage()));
    }
    CASCADE_ASSIGN_OR_RETURN(TensorView wo, SliceColumns(*l.wo, q0, nq, storage()));
    l.wo = keep(std::move(wo));
    if (c.is_moe()) {  // whole experts: this rank's share, the shared expert on one rank
      for (auto* experts : {&l.exp_gate, &l.exp_up, &l.exp_down}) {
        *experts = std::vector<const TensorView*>(experts->begin() + s.expert_begin,
                                                  experts->begin() + s.expert_end);
      }
      if (!s.shared_expert) l.shexp_router = l.shexp_gate = l.shexp_up = l.shexp_down = nullptr;
    } else {
      l.w_gate = keep(SliceRows(*l.w_gate, s.ffn_begin, s.ffn()));
      l.w_up = keep(SliceRows(*l.w_up, s.ffn_begin, s.ffn()));
      CASCADE_ASSIGN_OR_RETURN(TensorView down,
                               SliceColumns(*l.w_down, s.ffn_begin, s.ffn(), storage()));
      l.w_down = keep(std::move(down));
    }
    slice(&l.bq, q0, nq);  // q/k norms are per head (head_dim): whole on every rank
    gather(&l.bk, hd);
    gather(&l.bv, hd);
  }
  const TensorView* full_embd = w->token_embd;
  if (full_embd) w->token_embd = keep(SliceRows(*full_embd, s.vocab_begin, s.vocab()));
  if (w->output) {
    w->output = w->output == full_embd ? w->token_embd
                                       : keep(SliceRows(*w->output, s.vocab_begin, s.vocab()));
  }
  w->shard = s;
  return absl::OkStatus();
}

// A mixture-of-experts layer's FFN (prefix p, "blk.N."): the router, a view of each expert
// of the stacked ffn_{gate,up,down}_exps (kept by w), and the shared expert if any.
absl::Status BindExperts(Binder& b, const ModelConfig& c, const std::string& p, ModelWeights* w,
                         LayerWeights* lw) {
  const int64_t E = c.n_experts, f = c.expert_ffn_dim;
  CASCADE_ASSIGN_OR_RETURN(lw->router, b.Matrix(p + "ffn_gate_inp.weight", c.dim, E));
  CASCADE_ASSIGN_OR_RETURN(const TensorView* gate,
                           b.Stack(p + "ffn_gate_exps.weight", c.dim, f, E));
  CASCADE_ASSIGN_OR_RETURN(const TensorView* up, b.Stack(p + "ffn_up_exps.weight", c.dim, f, E));
  CASCADE_ASSIGN_OR_RETURN(const TensorView* down,
                           b.Stack(p + "ffn_down_exps.weight", f, c.dim, E));
  for (int64_t e = 0; e < E; ++e) {
    lw->exp_gate.push_back(Keep(w, SliceRows(*gate, e * f, f)));
    lw->exp_up.push_back(Keep(w, SliceRows(*up, e * f, f)));
    lw->exp_down.push_back(Keep(w, SliceRows(*down, e * c.dim, c.dim)));
  }
  if (c.shared_expert_ffn_dim == 0) return absl::OkStatus();
  const int64_t s = c.shared_expert_ffn_dim;
  CASCADE_ASSIGN_OR_RETURN(lw->shexp_router, b.Matrix(p + "ffn_gate_inp_shexp.weight", c.dim, 1));
  CASCADE_ASSIGN_OR_RETURN(lw->shexp_gate, b.Matrix(p + "ffn_gate_shexp.weight", c.dim, s));
  CASCADE_ASSIGN_OR_RETURN(lw->shexp_up, b.Matrix(p + "ffn_up_shexp.weight", c.dim, s));
  CASCADE_ASSIGN_OR_RETURN(lw->shexp_down, b.Matrix(p + "ffn_down_shexp.weight", s, c.dim));
  return absl::OkStatus();
}

// Layer l's weights; fused projections become row views of the fused tensor (kept by w).
absl::StatusOr<LayerWeights> BindLayer(Binder& b, const ModelConfig& c, int l, ModelWeights* w) {
  LayerWeights lw;
  const std::string p = absl::StrCat("blk.", l, ".");
  CASCADE_RETURN_IF_ERROR(b.Norm(p + "attn_norm.weight", c.dim, &lw.attn_norm));
  if (c.fused_projections) {
    CASCADE_ASSIGN_OR_RETURN(const TensorView* qkv,
                             b.Matrix(p + "attn_qkv.weight", c.dim, c.q_dim() + 2 * c.kv_dim()));
    lw.wq = Keep(w, SliceRows(*qkv, 0, c.q_dim()));
    lw.wk = Keep(w, SliceRows(*qkv, c.q_dim(), c.kv_dim()));
    lw.wv = Keep(w, SliceRows(*qkv, c.q_dim() + c.kv_dim(), c.kv_dim()));
    CASCADE_ASSIGN_OR_RETURN(const TensorView* gate_up,
                             b.Matrix(p + "ffn_up.weight", c.dim, 2 * c.ffn_dim));
    lw.w_gate = Keep(w, SliceRows(*gate_up, 0, c.ffn_dim));
    lw.w_up = Keep(w, SliceRows(*gate_up, c.ffn_dim, c.ffn_dim));
  } else {
    CASCADE_ASSIGN_OR_RETURN(lw.wq, b.Matrix(p + "attn_q.weight", c.dim, c.q_dim()));
    CASCADE_ASSIGN_OR_RETURN(lw.wk, b.Matrix(p + "attn_k.weight", c.dim, c.kv_dim()));
    CASCADE_ASSIGN_OR_RETURN(lw.wv, b.Matrix(p + "attn_v.weight", c.dim, c.kv_dim()));
    if (c.is_moe()) {
      CASCADE_RETURN_IF_ERROR(BindExperts(b, c, p, w, &lw));
    } else {
      CASCADE_ASSIGN_OR_RETURN(lw.w_gate, b.Matrix(p + "ffn_gate.weight", c.dim, c.ffn_dim));
      CASCADE_ASSIGN_OR_RETURN(lw.w_up, b.Matrix(p + "ffn_up.weight", c.dim, c.ffn_dim));
    }
  }
  CASCADE_ASSIGN_OR_RETURN(lw.wo, b.Matrix(p + "attn_output.weight", c.q_dim(), c.dim));
  if (!c.is_moe()) {
    CASCADE_ASSIGN_OR_RETURN(lw.w_down, b.Matrix(p + "ffn_down.weight", c.ffn_dim, c.dim));
  }
  const bool no_bias = !c.qkv_bias;
  CASCADE_RETURN_IF_ERROR(b.Vector(p + "attn_q.bias", c.q_dim(), no_bias, &lw.bq));
  CASCADE_RETURN_IF_ERROR(b.Vector(p + "attn_k.bias", c.kv_dim(), no_bias, &lw.bk));
  CASCADE_RETURN_IF_ERROR(b.Vector(p + "attn_v.bias", c.kv_dim(), no_bias, &lw.bv));
  if (c.qk_norm) {
    CASCADE_RETURN_IF_ERROR(b.Norm(p + "attn_q_norm.weight", c.head_dim, &lw.q_norm));
    CASCADE_RETURN_IF_ERROR(b.Norm(p + "attn_k_norm.weight", c.head_dim, &lw.k_norm));
  }
  CASCADE_RETURN_IF_ERROR(b.Norm(p + "ffn_norm.weight", c.dim, &lw.ffn_norm));
  if (c.post_norms) {
    CASCADE_RETURN_IF_ERROR(b.Norm(p + "post_attention_norm.weight", c.dim, &lw.post_attn_norm));
    CASCADE_RETURN_IF_ERROR(b.Norm(p + "post_ffw_norm.weight", c.dim, &lw.post_ffn_norm));
  }
  return lw;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::Bind(const ModelSource& source,
                                                                 LayerRange range,
                                                                 const TpShard* shard) {
  const ModelConfig& c = source.config();
  if (range.first < 0 || range.last > c.n_layers || range.first >= range.last) {
    return absl::InvalidArgumentError(absl::StrCat("layer range [", range.first, ", ", range.last,
                                                   ") is not inside [0, ", c.n_layers, ")"));
  }
  auto w = std::make_unique<ModelWeights>();
  w->range = range;
  w->has_embedding = range.first == 0;
  w->has_head = range.last == c.n_layers;
  Binder b(source);
  if (w->has_embedding || (w->has_head && c.tied_embeddings)) {
    CASCADE_ASSIGN_OR_RETURN(w->token_embd, b.Matrix("token_embd.weight", c.dim, c.vocab_size));
  }
  if (w->has_head) {
    CASCADE_RETURN_IF_ERROR(b.Norm("output_norm.weight", c.dim, &w->output_norm));
    if (c.tied_embeddings) {
      w->output = w->token_embd;
    } else {
      CASCADE_ASSIGN_OR_RETURN(w->output, b.Matrix("output.weight", c.dim, c.vocab_size));
    }
  }
  for (int l = range.first; l < range.last; ++l) {
    CASCADE_ASSIGN_OR_RETURN(LayerWeights lw, BindLayer(b, c, l, w.get()));
    w->layers.push_back(std::move(lw));
  }
  if (shard != nullptr) CASCADE_RETURN_IF_ERROR(ApplyShard(c, *shard, w.get()));
  return w;
}

void ModelWeights::ReleaseOwnedBytes() {
  for (const auto& bytes : owned_bytes) {
    const uint8_t* begin = bytes->data();
    const uint8_t* end = begin + bytes->size();
    for (const auto& v : owned_views) {
      if (v->data != nullptr && v->data >= begin && v->data < end) v->data = nullptr;
    }
  }
  owned_bytes.clear();
}

std::vector<const TensorView*> LayerWeights::Matrices() const {
  std::vector<const TensorView*> all;
  for (const TensorView* t : {wq, wk, wv, wo, w_gate, w_up, w_down, router, shexp_gate, shexp_up,
                              shexp_down, shexp_router}) {
    if (t != nullptr) all.push_back(t);
  }
  for (const auto* experts : {&exp_gate, &exp_up, &exp_down}) {
    all.insert(all.end(), experts->begin(), experts->end());
  }
  return all;
}

uint64_t ModelWeights::matrix_bytes() const {
  uint64_t total = 0;
  for (const auto& l : layers) {
    for (const TensorView* t : l.Matrices()) total += t->nbytes;
  }
  if (has_head && output) total += output->nbytes;
  return total;
}

}  // namespace cascade
