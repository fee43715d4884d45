#include "engine/stage.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "util/status_macros.h"

namespace cascade {

absl::StatusOr<std::unique_ptr<Stage>> Stage::Create(const ModelSource& source,
                                                     const StageOptions& options,
                                                     std::unique_ptr<Backend> backend) {
  std::unique_ptr<Stage> s(new Stage());
  s->options_ = options;
  s->config_ = source.config();
  LayerRange range = options.layers;
  if (range.first == 0 && range.last == 0) range = {0, static_cast<int>(s->config_.n_layers)};
  CASCADE_ASSIGN_OR_RETURN(s->weights_, ModelWeights::Bind(source, range));
  if (backend == nullptr) {
    CpuBackendOptions bo;
    bo.threads = options.threads;
    bo.quantized_activations = options.quantized_activations;
    backend = std::make_unique<CpuBackend>(bo);
  }
  s->backend_ = std::move(backend);
  if (options.kv_block_size <= 0 || options.max_batch_tokens <= 0) {
    return absl::InvalidArgumentError("stage options: block size and batch size must be > 0");
  }
  KvCacheOptions kv;
  kv.n_layers = range.size();
  kv.n_kv_heads = static_cast<int>(s->config_.n_kv_heads);
  kv.head_dim = static_cast<int>(s->config_.head_dim);
  kv.block_size = options.kv_block_size;
  kv.max_positions = s->config_.context_length;
  const int64_t blocks_per_seq =
      (s->config_.context_length + options.kv_block_size - 1) / options.kv_block_size;
  kv.num_blocks = options.kv_blocks > 0
                      ? options.kv_blocks
                      : blocks_per_seq * std::max(1, options.kv_sequences);
  if (kv.num_blocks > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache of ", kv.num_blocks,
                                                   " blocks is too large"));
  }
  s->kv_ = std::make_unique<KvCache>(kv);
  s->rope_freq_ = s->config_.RopeFrequencies();
  return s;
}

absl::Status Stage::Validate(std::span<const TokenSlot> slots,
                             std::span<const float> hidden_in) const {
  const int64_t n = static_cast<int64_t>(slots.size());
  if (n == 0) return absl::InvalidArgumentError("batch is empty");
  if (n > options_.max_batch_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("batch of ", n, " tokens exceeds the limit of ",
                                                   options_.max_batch_tokens));
  }
  if (is_first()) {
    for (const TokenSlot& s : slots) {
      if (s.token < 0 || s.token >= config_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("token id ", s.token,
                                                       " is outside the vocabulary of ",
                                                       config_.vocab_size));
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
  CASCADE_ASSIGN_OR_RETURN(KvCache::Plan plan, kv_->PlanBatch(slots));
  kv_->Apply(plan);

  const int64_t n = static_cast<int64_t>(slots.size());
  const int64_t dim = config_.dim;
  x_.resize(n * dim);
  xb_.resize(n * dim);
  q_.resize(n * config_.q_dim());
  k_.resize(n * config_.kv_dim());
  v_.resize(n * config_.kv_dim());
  att_.resize(n * config_.q_dim());
  hb_.resize(n * config_.ffn_dim);
  hb2_.resize(n * config_.ffn_dim);
  pos_.resize(n);
  for (int64_t i = 0; i < n; ++i) pos_[i] = slots[i].pos;

  if (is_first()) {
    std::vector<int32_t> ids(n);
    for (int64_t i = 0; i < n; ++i) ids[i] = slots[i].token;
    backend_->GetRows(*weights_->token_embd, ids.data(), n, x_.data());  // (n, dim)
  } else {
    std::memcpy(x_.data(), hidden_in.data(), n * dim * sizeof(float));
  }

  for (int l = 0; l < weights_->range.size(); ++l) Layer(l, slots, plan);

  if (!is_last()) {
    out->assign(x_.begin(), x_.end());  // (n, dim)
    return absl::OkStatus();
  }
  // Head: final norm and output projection for the slots that want logits.
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < n; ++i) {
    if (slots[i].want_logits) rows.push_back(i);
  }
  const int64_t m = static_cast<int64_t>(rows.size());
  for (int64_t j = 0; j < m; ++j) {
    std::memcpy(xb_.data() + j * dim, x_.data() + rows[j] * dim, dim * sizeof(float));
  }
  backend_->RmsNorm(xb_.data(), weights_->output_norm.data(), m, dim,
                    static_cast<float>(config_.norm_eps), xb_.data());
  out->resize(m * config_.vocab_size);  // (m, vocab)
  if (m > 0) backend_->MatMul(*weights_->output, xb_.data(), m, out->data());
  return absl::OkStatus();
}

void Stage::Layer(int l, std::span<const TokenSlot> slots, const KvCache::Plan& plan) {
  const LayerWeights& w = weights_->layers[l];
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(slots.size());
  const int64_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.ffn_dim;
  const float eps = static_cast<float>(c.norm_eps);
  Backend& be = *backend_;

  // Attention block.
  be.RmsNorm(x_.data(), w.attn_norm.data(), n, dim, eps, xb_.data());  // (n, dim)
  be.MatMul(*w.wq, xb_.data(), n, q_.data());                          // (n, q_dim)
  be.MatMul(*w.wk, xb_.data(), n, k_.data());                          // (n, kv_dim)
  be.MatMul(*w.wv, xb_.data(), n, v_.data());                          // (n, kv_dim)
  if (!w.bq.empty()) {
    be.AddBias(w.bq.data(), n, q_dim, q_.data());
    be.AddBias(w.bk.data(), n, kv_dim, k_.data());
    be.AddBias(w.bv.data(), n, kv_dim, v_.data());
  }
  be.Rope(q_.data(), pos_.data(), n, static_cast<int>(c.n_heads), static_cast<int>(c.head_dim),
          static_cast<int>(c.rope_dim), c.rope_layout, rope_freq_.data());
  be.Rope(k_.data(), pos_.data(), n, static_cast<int>(c.n_kv_heads), static_cast<int>(c.head_dim),
          static_cast<int>(c.rope_dim), c.rope_layout, rope_freq_.data());

  // Store this batch's keys and values, then attend.
  float* kpool = kv_->keys(l);  // (num_blocks * block_size, kv_dim)
  float* vpool = kv_->values(l);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(kpool + plan.slot_rows[i] * kv_dim, k_.data() + i * kv_dim, kv_dim * sizeof(float));
    std::memcpy(vpool + plan.slot_rows[i] * kv_dim, v_.data() + i * kv_dim, kv_dim * sizeof(float));
  }
  std::vector<AttentionQuery> queries(n);
  for (int64_t i = 0; i < n; ++i) {
    queries[i].q = q_.data() + i * q_dim;
    queries[i].out = att_.data() + i * q_dim;
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
  be.Attention(ap);                                             // (n, q_dim)
  be.MatMul(*w.wo, att_.data(), n, xb_.data());                 // (n, dim)
  be.Add(xb_.data(), n * dim, x_.data());

  // Feed-forward block (SwiGLU).
  be.RmsNorm(x_.data(), w.ffn_norm.data(), n, dim, eps, xb_.data());
  be.MatMul(*w.w_gate, xb_.data(), n, hb_.data());              // (n, ffn)
  be.MatMul(*w.w_up, xb_.data(), n, hb2_.data());               // (n, ffn)
  be.SiluMul(hb_.data(), hb2_.data(), n * ffn, hb_.data());
  be.MatMul(*w.w_down, hb_.data(), n, xb_.data());              // (n, dim)
  be.Add(xb_.data(), n * dim, x_.data());
}

}  // namespace cascade
