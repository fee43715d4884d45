#include "engine/stage.h"

#include <cmath>
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

// The backend features a model needs beyond the Llama block.
std::vector<BackendFeature> RequiredFeatures(const ModelConfig& c) {
  std::vector<BackendFeature> f;
  if (c.sliding_window > 0) f.push_back(BackendFeature::kSlidingWindow);
  if (c.attn_softcap > 0) f.push_back(BackendFeature::kAttentionSoftCap);
  if (c.ffn_activation == FfnActivation::kGeluTanh) f.push_back(BackendFeature::kGeluMul);
  if (c.scale_embeddings || c.RopeMagnitude() != 1.0f) f.push_back(BackendFeature::kScale);
  if (c.final_softcap > 0) f.push_back(BackendFeature::kSoftCap);
  if (c.is_moe()) f.push_back(BackendFeature::kMixtureOfExperts);
  return f;
}

// Unimplemented, naming the feature, when the backend lacks one the model needs.
absl::Status CheckFeatures(const Backend& be, const ModelConfig& c, const std::string& path) {
  for (BackendFeature f : RequiredFeatures(c)) {
    if (!be.Supports(f)) {
      return absl::UnimplementedError(absl::StrCat(path, ": this ", c.arch, " model needs ",
                                                   BackendFeatureName(f), ", which the ", be.name(),
                                                   " backend does not implement"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DeviceBuffer> Stage::UploadVector(const std::vector<float>& v) {
  if (v.empty()) return DeviceBuffer();
  CASCADE_ASSIGN_OR_RETURN(DeviceBuffer b, backend_->Allocate(v.size() * sizeof(float)));
  backend_->CopyToDevice(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

absl::StatusOr<TensorView> Stage::UploadMatrix(const TensorView* host, bool* all_copied) {
  if (host == nullptr) return TensorView();
  CASCADE_ASSIGN_OR_RETURN(TensorView v, backend_->UploadWeight(*host));
  *all_copied = *all_copied && v.data != host->data;
  return v;
}

absl::StatusOr<Stage::ResidentLayer> Stage::UploadLayer(const LayerWeights& lw, bool* all_copied) {
  ResidentLayer r;
  const std::pair<TensorView*, const TensorView*> matrices[] = {{&r.wq, lw.wq},
                                                                {&r.wk, lw.wk},
                                                                {&r.wv, lw.wv},
                                                                {&r.wo, lw.wo},
                                                                {&r.w_gate, lw.w_gate},
                                                                {&r.w_up, lw.w_up},
                                                                {&r.w_down, lw.w_down},
                                                                {&r.router, lw.router},
                                                                {&r.shexp_gate, lw.shexp_gate},
                                                                {&r.shexp_up, lw.shexp_up},
                                                                {&r.shexp_down, lw.shexp_down},
                                                                {&r.shexp_router, lw.shexp_router}};
  for (const auto& [dst, src] : matrices) {
    CASCADE_ASSIGN_OR_RETURN(*dst, UploadMatrix(src, all_copied));
  }
  const std::pair<std::vector<TensorView>*, const std::vector<const TensorView*>*> experts[] = {
      {&r.exp_gate, &lw.exp_gate}, {&r.exp_up, &lw.exp_up}, {&r.exp_down, &lw.exp_down}};
  for (const auto& [dst, src] : experts) {
    for (const TensorView* t : *src) {
      CASCADE_ASSIGN_OR_RETURN(TensorView v, UploadMatrix(t, all_copied));
      dst->push_back(std::move(v));
    }
  }
  const std::pair<DeviceBuffer*, const std::vector<float>*> vectors[] = {
      {&r.attn_norm, &lw.attn_norm},
      {&r.ffn_norm, &lw.ffn_norm},
      {&r.bq, &lw.bq},
      {&r.bk, &lw.bk},
      {&r.bv, &lw.bv},
      {&r.q_norm, &lw.q_norm},
      {&r.k_norm, &lw.k_norm},
      {&r.post_attn_norm, &lw.post_attn_norm},
      {&r.post_ffn_norm, &lw.post_ffn_norm}};
  for (const auto& [dst, src] : vectors) {
    CASCADE_ASSIGN_OR_RETURN(*dst, UploadVector(*src));
  }
  return r;
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
  const ModelConfig& cfg = s->config_;
  s->local_ = {cfg.n_heads, cfg.n_kv_heads, cfg.q_dim(), cfg.kv_dim(), cfg.ffn_dim};
  if (options.tp != nullptr) {
    // Cut where every rank's slices fall on the blocks of the weights' types.
    TpAlignment align;
    for (const LayerWeights& l : s->weights_->layers) {
      align.q_cols = std::max<int64_t>(align.q_cols, Traits(l.wo->type).block_elems);
      if (l.w_down != nullptr) {  // null in a mixture of experts, which is not split
        align.ffn = std::max<int64_t>(align.ffn, Traits(l.w_down->type).block_elems);
      }
    }
    const int size = options.tp->size();
    std::vector<TpShard> shards;
    for (int r = 0; r < size; ++r) {
      CASCADE_ASSIGN_OR_RETURN(TpShard shard, MakeTpShard(cfg, r, size, align));
      s->vocab_slices_.push_back({shard.vocab_begin, shard.vocab_end});
      s->vocab_stride_ = std::max(s->vocab_stride_, shard.vocab());
      shards.push_back(shard);
    }
    const TpShard& mine = shards[options.tp->rank()];
    CASCADE_ASSIGN_OR_RETURN(s->weights_, ModelWeights::Bind(source, range, &mine));
    s->local_ = {mine.n_heads(), mine.n_kv_heads(), mine.n_heads() * cfg.head_dim,
                 mine.n_kv_heads() * cfg.head_dim, mine.ffn()};
    s->tp_ = options.tp;
  }
  if (backend == nullptr) {
    CpuBackendOptions bo;
    bo.threads = options.threads;
    bo.quantized_activations = options.quantized_activations;
    backend = std::make_unique<CpuBackend>(bo);
  }
  s->backend_ = std::move(backend);
  Backend& be = *s->backend_;
  CASCADE_RETURN_IF_ERROR(CheckFeatures(be, cfg, source.path()));
  if (s->tp_ != nullptr && s->tp_->memory_kind() != be.memory_kind()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallelism: the group (", s->tp_->name(), ") and the backend (", be.name(),
        ") work on different kinds of memory"));
  }

  // Weights as the backend will use them.
  const ModelWeights& w = *s->weights_;
  bool all_copied = true;  // the backend made its own copy of every matrix
  if (w.token_embd) {
    CASCADE_ASSIGN_OR_RETURN(s->token_embd_, s->UploadMatrix(w.token_embd, &all_copied));
  }
  if (w.has_head) {
    if (w.output == w.token_embd) {
      s->output_ = s->token_embd_;
    } else {
      CASCADE_ASSIGN_OR_RETURN(s->output_, s->UploadMatrix(w.output, &all_copied));
    }
    CASCADE_ASSIGN_OR_RETURN(s->output_norm_, s->UploadVector(w.output_norm));
  }
  for (const LayerWeights& lw : w.layers) {
    CASCADE_ASSIGN_OR_RETURN(ResidentLayer r, s->UploadLayer(lw, &all_copied));
    s->layers_.push_back(std::move(r));
  }
  // A tensor-parallel shard's column slices were copied here once already: with the
  // backend's own copies, those are not needed again.
  if (all_copied) s->weights_->ReleaseOwnedBytes();

  KvCacheOptions kv;
  kv.n_layers = range.size();
  kv.n_kv_heads = static_cast<int>(s->local_.n_kv_heads);
  kv.head_dim = static_cast<int>(s->config_.head_dim);
  kv.block_size = options.kv_block_size;
  kv.max_positions = s->config_.context_length;
  kv.type = options.kv_type;
  kv.resident = options.kv_resident;
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
  if (s->config_.rope_theta_local > 0) s->rope_freq_local_ = s->config_.LocalRopeFrequencies();
  s->zero_row_.assign(static_cast<size_t>(s->config_.dim), 0.0f);
  if (s->tp_ != nullptr) {
    // Every buffer a batch can need, now: a rank must not fail a batch the others run.
    const int64_t n = options.max_batch_tokens;
    CASCADE_RETURN_IF_ERROR(s->EnsureCapacity(n, s->weights_->has_head ? n : 0));
  }
  return s;
}

absl::Status Stage::EnsureCapacity(int64_t n, int64_t n_logits) {
  const ModelConfig& c = config_;
  const LocalDims& d = local_;
  auto grow = [&](DeviceBuffer* b, int64_t floats) -> absl::Status {
    const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
    if (b->size() >= bytes) return absl::OkStatus();
    CASCADE_ASSIGN_OR_RETURN(*b, backend_->Allocate(bytes));
    return absl::OkStatus();
  };
  if (n > capacity_) {
    CASCADE_RETURN_IF_ERROR(grow(&x_, n * c.dim));
    CASCADE_RETURN_IF_ERROR(grow(&xb_, (n + 1) * c.dim));
    CASCADE_RETURN_IF_ERROR(grow(&q_, n * d.q_dim));
    CASCADE_RETURN_IF_ERROR(grow(&k_, n * d.kv_dim));
    CASCADE_RETURN_IF_ERROR(grow(&v_, n * d.kv_dim));
    CASCADE_RETURN_IF_ERROR(grow(&att_, n * d.q_dim));
    const int64_t ffn = c.is_moe() ? c.max_ffn_dim() : d.ffn;
    // A one-token step of a mixture of experts holds each routed expert's rows at once.
    const int64_t rows = c.is_moe() ? std::max(n, c.n_experts_used) : n;
    CASCADE_RETURN_IF_ERROR(grow(&hb_, rows * ffn));
    CASCADE_RETURN_IF_ERROR(grow(&hb2_, rows * ffn));
    if (c.is_moe()) {
      CASCADE_RETURN_IF_ERROR(grow(&router_, n * c.n_experts));
      CASCADE_RETURN_IF_ERROR(grow(&moe_in_, n * c.dim));
      CASCADE_RETURN_IF_ERROR(grow(&moe_out_, rows * c.dim));
    }
    capacity_ = n;
  }
  if (n_logits > logits_capacity_) {
    if (tp_ == nullptr) {
      CASCADE_RETURN_IF_ERROR(grow(&logits_, n_logits * c.vocab_size));
    } else {
      CASCADE_RETURN_IF_ERROR(grow(&logits_, n_logits * vocab_stride_));
      CASCADE_RETURN_IF_ERROR(grow(&gathered_, tp_->size() * n_logits * vocab_stride_));
    }
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
  if (!broken_.ok()) return broken_;
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
  kv_->Apply(plan);  // nothing below can fail but the tensor-parallel group

  Backend& be = *backend_;
  const int64_t dim = config_.dim;
  pos_.resize(n);
  for (int64_t i = 0; i < n; ++i) pos_[i] = slots[i].pos;
  float* x = x_.as<float>();
  if (is_first()) {
    Embed(slots, x);
    if (tp_ != nullptr) CASCADE_RETURN_IF_ERROR(ReduceAcrossRanks(x, n * dim));
    if (config_.scale_embeddings) be.Scale(x, n * dim, std::sqrt(static_cast<float>(dim)));
  } else {
    be.CopyToDevice(x, hidden_in.data(), n * dim * sizeof(float));
  }

  for (int l = 0; l < static_cast<int>(layers_.size()); ++l) {
    CASCADE_RETURN_IF_ERROR(Layer(l, slots, plan));
  }

  if (!is_last()) {
    out->resize(n * dim);  // (n, dim)
    be.CopyToHost(out->data(), x, n * dim * sizeof(float));
    return absl::OkStatus();
  }
  return Head(logit_rows, out);
}

void Stage::Embed(std::span<const TokenSlot> slots, float* x) {
  Backend& be = *backend_;
  const int64_t n = static_cast<int64_t>(slots.size());
  std::vector<int32_t> ids;
  ids.reserve(n);
  if (tp_ == nullptr) {
    for (const TokenSlot& s : slots) ids.push_back(s.token);
    be.GetRows(token_embd_, ids.data(), n, x);  // (n, dim)
    return;
  }
  // Split by vocabulary: this rank looks up the tokens of its slice into xb and gives the
  // others' tokens a zero row (row `found` of xb); the all-reduce then adds each token's
  // one non-zero row to zeros, which is exact.
  const TpShard& sh = *shard();
  std::vector<int64_t> rows(n);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = slots[i].token;
    if (t >= sh.vocab_begin && t < sh.vocab_end) {
      rows[i] = static_cast<int64_t>(ids.size());
      ids.push_back(static_cast<int32_t>(t - sh.vocab_begin));
    } else {
      rows[i] = -1;
    }
  }
  const int64_t found = static_cast<int64_t>(ids.size());
  const int64_t dim = config_.dim;
  float* xb = xb_.as<float>();
  if (found > 0) be.GetRows(token_embd_, ids.data(), found, xb);
  be.CopyToDevice(xb + found * dim, zero_row_.data(), dim * sizeof(float));
  for (int64_t& r : rows) {
    if (r < 0) r = found;
  }
  be.GatherRows(xb, rows.data(), n, dim, x);
}

absl::Status Stage::ReduceAcrossRanks(float* data, int64_t count) {
  backend_->Synchronize();  // a GPU's queued kernels complete the partial sums first
  absl::Status st = tp_->AllReduceSum(data, count);
  if (!st.ok()) {
    broken_ = absl::UnavailableError(absl::StrCat("the tensor-parallel group (", tp_->name(),
                                                  ") is broken: ", st.message()));
    return broken_;
  }
  return absl::OkStatus();
}

absl::Status Stage::Head(const std::vector<int64_t>& logit_rows, std::vector<float>* out) {
  // Final norm and output projection for the slots that want logits.
  Backend& be = *backend_;
  const int64_t m = static_cast<int64_t>(logit_rows.size());
  const int64_t dim = config_.dim, vocab = config_.vocab_size;
  out->resize(m * vocab);  // (m, vocab)
  if (m == 0) return absl::OkStatus();
  float* xb = xb_.as<float>();
  be.GatherRows(x_.as<float>(), logit_rows.data(), m, dim, xb);
  be.RmsNorm(xb, output_norm_.as<float>(), m, dim, static_cast<float>(config_.norm_eps), xb);
  be.MatMul(output_, xb, m, logits_.as<float>());  // (m, local vocabulary)
  if (config_.final_softcap > 0) {
    be.SoftCap(logits_.as<float>(), m * output_.rows(), static_cast<float>(config_.final_softcap));
  }
  if (tp_ == nullptr) {
    be.CopyToHost(out->data(), logits_.data(), out->size() * sizeof(float));
    return absl::OkStatus();
  }
  // Every rank's slice (padded to the widest), then each row put together in vocab order.
  const int size = tp_->size();
  const size_t part = static_cast<size_t>(m * vocab_stride_);
  be.Synchronize();
  if (absl::Status st = tp_->AllGather(logits_.data(), part * sizeof(float), gathered_.data());
      !st.ok()) {
    broken_ = absl::UnavailableError(absl::StrCat("the tensor-parallel group (", tp_->name(),
                                                  ") is broken: ", st.message()));
    return broken_;
  }
  host_gathered_.resize(part * size);
  be.CopyToHost(host_gathered_.data(), gathered_.data(), host_gathered_.size() * sizeof(float));
  for (int r = 0; r < size; ++r) {
    const auto [begin, end] = vocab_slices_[r];
    const int64_t width = end - begin;
    const float* src = host_gathered_.data() + part * r;
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(out->data() + i * vocab + begin, src + i * width, width * sizeof(float));
    }
  }
  return absl::OkStatus();
}

absl::Status Stage::Layer(int l, std::span<const TokenSlot> slots, const KvCache::Plan& plan) {
  const int64_t n = static_cast<int64_t>(slots.size());
  CASCADE_RETURN_IF_ERROR(AttentionBlock(l, slots, plan));
  return FfnBlock(l, n);
}

absl::Status Stage::AddResidual(const DeviceBuffer& post_norm, int64_t n) {
  const int64_t dim = config_.dim;
  float* xb = xb_.as<float>();
  if (tp_ != nullptr) CASCADE_RETURN_IF_ERROR(ReduceAcrossRanks(xb, n * dim));
  if (post_norm.data() != nullptr) {
    backend_->RmsNorm(xb, post_norm.as<float>(), n, dim, static_cast<float>(config_.norm_eps), xb);
  }
  backend_->Add(xb, n * dim, x_.as<float>());
  return absl::OkStatus();
}

void Stage::ScaleRotated(float* x, int64_t rows, float factor) {
  const int64_t hd = config_.head_dim, rd = config_.rope_dim;
  if (rd == hd) {  // the whole head rotates: one call
    backend_->Scale(x, rows * hd, factor);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) backend_->Scale(x + r * hd, rd, factor);
}

absl::Status Stage::AttentionBlock(int l, std::span<const TokenSlot> slots,
                                   const KvCache::Plan& plan) {
  const ResidentLayer& w = layers_[l];
  const ModelConfig& c = config_;
  const LocalDims& d = local_;
  const int64_t n = static_cast<int64_t>(slots.size());
  const int64_t q_dim = d.q_dim, kv_dim = d.kv_dim;
  const float eps = static_cast<float>(c.norm_eps);
  Backend& be = *backend_;
  float* xb = xb_.as<float>();
  float* q = q_.as<float>();
  float* k = k_.as<float>();
  float* v = v_.as<float>();
  float* att = att_.as<float>();

  // This rank's heads, when split.
  be.RmsNorm(x_.as<float>(), w.attn_norm.as<float>(), n, c.dim, eps, xb);  // (n, dim)
  {  // q (n, q_dim), k and v (n, kv_dim): one pass over the normed input
    const TensorView* const qkv[] = {&w.wq, &w.wk, &w.wv};
    float* const out[] = {q, k, v};
    be.MatMulShared(qkv, 3, xb, n, out);
  }
  if (w.bq.data() != nullptr) {
    be.AddBias(w.bq.as<float>(), n, q_dim, q);
    be.AddBias(w.bk.as<float>(), n, kv_dim, k);
    be.AddBias(w.bv.as<float>(), n, kv_dim, v);
  }
  if (w.q_norm.data() != nullptr) {  // per head: (n * heads, head_dim) rows
    be.RmsNorm(q, w.q_norm.as<float>(), n * d.n_heads, c.head_dim, eps, q);
    be.RmsNorm(k, w.k_norm.as<float>(), n * d.n_kv_heads, c.head_dim, eps, k);
  }
  const float* freq =
      c.UsesLocalRope(weights_->range.first + l) ? rope_freq_local_.data() : rope_freq_.data();
  be.Rope(q, pos_.data(), n, static_cast<int>(d.n_heads), static_cast<int>(c.head_dim),
          static_cast<int>(c.rope_dim), c.rope_layout, freq);
  be.Rope(k, pos_.data(), n, static_cast<int>(d.n_kv_heads), static_cast<int>(c.head_dim),
          static_cast<int>(c.rope_dim), c.rope_layout, freq);
  if (const float m = c.RopeMagnitude(); m != 1.0f) {  // LongRoPE: cos and sin times m
    ScaleRotated(q, n * d.n_heads, m);
    ScaleRotated(k, n * d.n_kv_heads, m);
  }

  // Store this batch's keys and values, then attend over each sequence's cache.
  void* kpool = kv_->keys(l);  // kv_->layout()
  void* vpool = kv_->values(l);
  be.StoreKv(k, v, plan.slot_rows.data(), n, kv_->layout(), kpool, vpool);
  std::vector<AttentionQuery> queries(n);
  for (int64_t i = 0; i < n; ++i) {
    queries[i].q = q + i * q_dim;
    queries[i].out = att + i * q_dim;
    queries[i].blocks = kv_->BlockTable(slots[i].seq).data();
    queries[i].n_ctx = slots[i].pos + 1;
  }
  AttentionParams ap;
  ap.n_heads = static_cast<int>(d.n_heads);
  ap.n_kv_heads = static_cast<int>(d.n_kv_heads);
  ap.head_dim = static_cast<int>(c.head_dim);
  ap.scale = c.AttentionScale();
  ap.window = static_cast<int32_t>(c.WindowOf(weights_->range.first + l));
  ap.softcap = static_cast<float>(c.attn_softcap);
  ap.block_size = kv_->options().block_size;
  ap.k_pool = kpool;
  ap.v_pool = vpool;
  ap.kv_type = kv_->options().type;
  ap.queries = queries.data();
  ap.n_queries = n;
  be.Attention(ap);             // (n, q_dim)
  be.MatMul(w.wo, att, n, xb);  // (n, dim); a partial sum when split by columns
  return AddResidual(w.post_attn_norm, n);
}

}  // namespace cascade
