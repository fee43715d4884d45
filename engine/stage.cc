#include "engine/stage.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "util/status_macros.h"

namespace cascade {

absl::StatusOr<DeviceBuffer> Stage::UploadVector(const std::vector<float>& v) {
  if (v.empty()) return DeviceBuffer();
  CASCADE_ASSIGN_OR_RETURN(DeviceBuffer b, backend_->Allocate(v.size() * sizeof(float)));
  backend_->CopyToDevice(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

absl::StatusOr<std::unique_ptr<Stage>> Stage::Create(const ModelSource& source,
                                                     const StageOptions& options,
                                                     std::unique_ptr<Backend> backend) {
  std::unique_ptr<Stage> s(new Stage());
  s->options_ = options;
  s->config_ = source.config();
  LayerRange range = options.layers;
  if (range.first == 0 && range.last == 0) range = {0, static_cast<int>(s->config_.n_layers)};
  CASCADE_ASSIGN_OR_RETURN(s->weights_, ModelWeights::Bind(source, range));
  if (options.kv_block_size <= 0 || options.max_batch_tokens <= 0) {
    return absl::InvalidArgumentError("stage options: block size and batch size must be > 0");
  }
  if (backend == nullptr) {
    CpuBackendOptions bo;
    bo.threads = options.threads;
    bo.quantized_activations = options.quantized_activations;
    backend = std::make_unique<CpuBackend>(bo);
  }
  s->backend_ = std::move(backend);
  Backend& be = *s->backend_;

  // Weights as the backend will use them.
  const ModelWeights& w = *s->weights_;
  if (w.token_embd) {
    CASCADE_ASSIGN_OR_RETURN(s->token_embd_, be.UploadWeight(*w.token_embd));
  }
  if (w.has_head) {
    if (w.output == w.token_embd) {
      s->output_ = s->token_embd_;
    } else {
      CASCADE_ASSIGN_OR_RETURN(s->output_, be.UploadWeight(*w.output));
    }
    CASCADE_ASSIGN_OR_RETURN(s->output_norm_, s->UploadVector(w.output_norm));
  }
  for (const LayerWeights& lw : w.layers) {
    ResidentLayer r;
    CASCADE_ASSIGN_OR_RETURN(r.wq, be.UploadWeight(*lw.wq));
    CASCADE_ASSIGN_OR_RETURN(r.wk, be.UploadWeight(*lw.wk));
    CASCADE_ASSIGN_OR_RETURN(r.wv, be.UploadWeight(*lw.wv));
    CASCADE_ASSIGN_OR_RETURN(r.wo, be.UploadWeight(*lw.wo));
    CASCADE_ASSIGN_OR_RETURN(r.w_gate, be.UploadWeight(*lw.w_gate));
    CASCADE_ASSIGN_OR_RETURN(r.w_up, be.UploadWeight(*lw.w_up));
    CASCADE_ASSIGN_OR_RETURN(r.w_down, be.UploadWeight(*lw.w_down));
    CASCADE_ASSIGN_OR_RETURN(r.attn_norm, s->UploadVector(lw.attn_norm));
    CASCADE_ASSIGN_OR_RETURN(r.ffn_norm, s->UploadVector(lw.ffn_norm));
    CASCADE_ASSIGN_OR_RETURN(r.bq, s->UploadVector(lw.bq));
    CASCADE_ASSIGN_OR_RETURN(r.bk, s->UploadVector(lw.bk));
    CASCADE_ASSIGN_OR_RETURN(r.bv, s->UploadVector(lw.bv));
    s->layers_.push_back(std::move(r));
  }

  KvCacheOptions kv;
  kv.n_layers = range.size();
  kv.n_kv_heads = static_cast<int>(s->config_.n_kv_heads);
  kv.head_dim = static_cast<int>(s->config_.head_dim);
  kv.block_size = options.kv_block_size;
  kv.max_positions = s->config_.context_length;
  const int64_t blocks_per_seq =
      (s->config_.context_length + options.kv_block_size - 1) / options.kv_block_size;
  kv.num_blocks = options.kv_blocks > 0 ? options.kv_blocks
                                        : blocks_per_seq * std::max(1, options.kv_sequences);
  if (kv.num_blocks > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache of ", kv.num_blocks, " blocks is too large"));
  }
  CASCADE_ASSIGN_OR_RETURN(s->kv_, KvCache::Create(kv, be));
  s->rope_freq_ = s->config_.RopeFrequencies();
  return s;
}

absl::Status Stage::EnsureCapacity(int64_t n, int64_t n_logits) {
  const ModelConfig& c = config_;
  auto grow = [&](DeviceBuffer* b, int64_t floats) -> absl::Status {
    const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
    if (b->size() >= bytes) return absl::OkStatus();
    CASCADE_ASSIGN_OR_RETURN(*b, backend_->Allocate(bytes));
    return absl::OkStatus();
  };
  if (n > capacity_) {
    CASCADE_RETURN_IF_ERROR(grow(&x_, n * c.dim));
    CASCADE_RETURN_IF_ERROR(grow(&xb_, n * c.dim));
    CASCADE_RETURN_IF_ERROR(grow(&q_, n * c.q_dim()));
    CASCADE_RETURN_IF_ERROR(grow(&k_, n * c.kv_dim()));
    CASCADE_RETURN_IF_ERROR(grow(&v_, n * c.kv_dim()));
    CASCADE_RETURN_IF_ERROR(grow(&att_, n * c.q_dim()));
    CASCADE_RETURN_IF_ERROR(grow(&hb_, n * c.ffn_dim));
    CASCADE_RETURN_IF_ERROR(grow(&hb2_, n * c.ffn_dim));
    capacity_ = n;
  }
  if (n_logits > logits_capacity_) {
    CASCADE_RETURN_IF_ERROR(grow(&logits_, n_logits * c.vocab_size));
    logits_capacity_ = n_logits;
  }
  return absl::OkStatus();
}

absl::Status Stage::Validate(std::span<const TokenSlot> slots,
                             std::span<const float> hidden_in) const {
  const int64_t n = static_cast<int64_t>(slots.size());
  if (n == 0) return absl::InvalidArgumentError("batch is empty");
  if (n > options_.max_batch_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", n, " tokens exceeds the limit of ", options_.max_batch_tokens));
  }
  if (is_first()) {
    for (const TokenSlot& s : slots) {
      if (s.token < 0 || s.token >= config_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "token id ", s.token, " is outside the vocabulary of ", config_.vocab_size));
      }
    }
  } else if (static_cast<int64_t>(hidden_in.size()) != n * config_.dim) {
    return absl::InvalidArgumentError(absl::StrCat("activations hold ", hidden_in.size(),
                                                   " values; a batch of ", n, " tokens needs ",
                                                   n * config_.dim));
  }
  return absl::OkStatus();
}

absl::Status Stage::Forward(std::span<const TokenSlot> slots, std::span<const float> hidden_in,
                            std::vector<float>* out) {
  CASCADE_RETURN_IF_ERROR(Validate(slots, hidden_in));
  const int64_t n = static_cast<int64_t>(slots.size());
  std::vector<int64_t> logit_rows;
  if (is_last()) {
    for (int64_t i = 0; i < n; ++i) {
      if (slots[i].want_logits) logit_rows.push_back(i);
    }
  }
  const int64_t m = static_cast<int64_t>(logit_rows.size());
  CASCADE_RETURN_IF_ERROR(EnsureCapacity(n, m));
  CASCADE_ASSIGN_OR_RETURN(KvCache::Plan plan, kv_->PlanBatch(slots));
  kv_->Apply(plan);  // nothing below can fail

  Backend& be = *backend_;
  const int64_t dim = config_.dim;
  pos_.resize(n);
  for (int64_t i = 0; i < n; ++i) pos_[i] = slots[i].pos;
  float* x = x_.as<float>();
  if (is_first()) {
    std::vector<int32_t> ids(n);
    for (int64_t i = 0; i < n; ++i) ids[i] = slots[i].token;
    be.GetRows(token_embd_, ids.data(), n, x);  // (n, dim)
  } else {
    be.CopyToDevice(x, hidden_in.data(), n * dim * sizeof(float));
  }

  for (int l = 0; l < static_cast<int>(layers_.size()); ++l) Layer(l, slots, plan);

  if (!is_last()) {
    out->resize(n * dim);  // (n, dim)
    be.CopyToHost(out->data(), x, n * dim * sizeof(float));
    return absl::OkStatus();
  }
  // Head: final norm and output projection for the slots that want logits.
  out->resize(m * config_.vocab_size);  // (m, vocab)
  if (m == 0) return absl::OkStatus();
  float* xb = xb_.as<float>();
  be.GatherRows(x, logit_rows.data(), m, dim, xb);
  be.RmsNorm(xb, output_norm_.as<float>(), m, dim, static_cast<float>(config_.norm_eps), xb);
  be.MatMul(output_, xb, m, logits_.as<float>());
  be.CopyToHost(out->data(), logits_.data(), out->size() * sizeof(float));
  return absl::OkStatus();
}

void Stage::Layer(int l, std::span<const TokenSlot> slots, const KvCache::Plan& plan) {
  const ResidentLayer& w = layers_[l];
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(slots.size());
  const int64_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.ffn_dim;
  const float eps = static_cast<float>(c.norm_eps);
  Backend& be = *backend_;
  float* x = x_.as<float>();
  float* xb = xb_.as<float>();
  float* q = q_.as<float>();
  float* k = k_.as<float>();
  float* v = v_.as<float>();
  float* att = att_.as<float>();
  float* hb = hb_.as<float>();
  float* hb2 = hb2_.as<float>();

  // Attention block.
  be.RmsNorm(x, w.attn_norm.as<float>(), n, dim, eps, xb);  // (n, dim)
  be.MatMul(w.wq, xb, n, q);                                // (n, q_dim)
  be.MatMul(w.wk, xb, n, k);                                // (n, kv_dim)
  be.MatMul(w.wv, xb, n, v);                                // (n, kv_dim)
  if (w.bq.data() != nullptr) {
    be.AddBias(w.bq.as<float>(), n, q_dim, q);
    be.AddBias(w.bk.as<float>(), n, kv_dim, k);
    be.AddBias(w.bv.as<float>(), n, kv_dim, v);
  }
  be.Rope(q, pos_.data(), n, static_cast<int>(c.n_heads), static_cast<int>(c.head_dim),
          static_cast<int>(c.rope_dim), c.rope_layout, rope_freq_.data());
  be.Rope(k, pos_.data(), n, static_cast<int>(c.n_kv_heads), static_cast<int>(c.head_dim),
          static_cast<int>(c.rope_dim), c.rope_layout, rope_freq_.data());

  // Store this batch's keys and values, then attend over each sequence's cache.
  float* kpool = kv_->keys(l);  // (num_blocks * block_size, kv_dim)
  float* vpool = kv_->values(l);
  be.StoreKv(k, v, plan.slot_rows.data(), n, kv_dim, kpool, vpool);
  std::vector<AttentionQuery> queries(n);
  for (int64_t i = 0; i < n; ++i) {
    queries[i].q = q + i * q_dim;
    queries[i].out = att + i * q_dim;
    queries[i].blocks = kv_->BlockTable(slots[i].seq).data();
    queries[i].n_ctx = slots[i].pos + 1;
  }
  AttentionParams ap;
  ap.n_heads = static_cast<int>(c.n_heads);
  ap.n_kv_heads = static_cast<int>(c.n_kv_heads);
  ap.head_dim = static_cast<int>(c.head_dim);
  ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  ap.block_size = kv_->options().block_size;
  ap.k_pool = kpool;
  ap.v_pool = vpool;
  ap.queries = queries.data();
  ap.n_queries = n;
  be.Attention(ap);             // (n, q_dim)
  be.MatMul(w.wo, att, n, xb);  // (n, dim)
  be.Add(xb, n * dim, x);

  // Feed-forward block (SwiGLU).
  be.RmsNorm(x, w.ffn_norm.as<float>(), n, dim, eps, xb);
  be.MatMul(w.w_gate, xb, n, hb);  // (n, ffn)
  be.MatMul(w.w_up, xb, n, hb2);   // (n, ffn)
  be.SiluMul(hb, hb2, n * ffn, hb);
  be.MatMul(w.w_down, hb, n, xb);  // (n, dim)
  be.Add(xb, n * dim, x);
}

}  // namespace cascade
