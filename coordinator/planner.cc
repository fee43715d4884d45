#include "coordinator/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "model/tensor_parallel.h"
#include "util/status_macros.h"

namespace cascade {
namespace {

double BitsPerWeight(TensorType t) {
  const TensorTypeTraits& tr = Traits(t);
  return 8.0 * tr.block_bytes / tr.block_elems;
}

// A matrix's bytes: exact for a type stored throughout, scaled by the mix's average bits per
// weight for a mix.
uint64_t MatrixBytes(const WeightType& t, int64_t cols, int64_t rows) {
  uint64_t rb = 0;
  if (!RowBytes(t.type, static_cast<uint64_t>(cols), &rb)) rb = static_cast<uint64_t>(cols) * 4;
  const uint64_t bytes = rb * static_cast<uint64_t>(rows);
  const double scale = t.bits_per_weight / BitsPerWeight(t.type);
  return scale == 1.0 ? bytes : static_cast<uint64_t>(std::ceil(static_cast<double>(bytes) * scale));
}

// llama.cpp's mixed file types: the main type, and the average bits per weight of a Llama
// model's matrices as llama.cpp's quantize reports them (attn_v, ffn_down of some layers
// and the output matrix are kept in a larger type).
struct Mix {
  const char* name;
  TensorType type;
  double bits_per_weight;
};
constexpr Mix kMixes[] = {
    {"Q3_K_S", TensorType::kQ3_K, 3.50}, {"Q3_K_M", TensorType::kQ3_K, 3.91},
    {"Q3_K_L", TensorType::kQ3_K, 4.27}, {"Q4_K_S", TensorType::kQ4_K, 4.58},
    {"Q4_K_M", TensorType::kQ4_K, 4.85}, {"Q5_K_S", TensorType::kQ5_K, 5.54},
    {"Q5_K_M", TensorType::kQ5_K, 5.69},
};

// Every GGUF type number the kernels compute with.
std::vector<TensorType> ComputeTypes() {
  std::vector<TensorType> out;
  for (uint32_t raw = 0; raw < 64; ++raw) {
    std::optional<TensorTypeTraits> t = LookupTensorType(raw);
    if (t && IsComputeSupported(t->type)) out.push_back(t->type);
  }
  return out;
}

// Weights of stage [first, last) of a pipeline of `stages` stages.
uint64_t StageWeights(const ModelProfile& m, LayerRange r) {
  uint64_t w = 0;
  for (int l = r.first; l < r.last; ++l) w += m.layer_bytes[l];
  const bool first = r.first == 0, last = r.last == static_cast<int>(m.layer_bytes.size());
  if (first) w += m.embedding_bytes;
  if (last) w += m.head_bytes;
  if (last && !first && m.config.tied_embeddings) w += m.embedding_bytes;
  return w;
}

StageMemory StageCost(const ModelProfile& m, LayerRange r, const PlanLimits& lim) {
  return EstimateStageMemory(m.config, r, StageWeights(m, r), lim.KvTokens(m.config.context_length),
                             lim.batch_tokens, nullptr, lim.kv_type);
}

// The share of a layer's bytes that one rank of a split keeps.
uint64_t LayerShare(const ModelProfile& m, int l, const TpShard& s) {
  const ModelConfig& c = m.config;
  const ModelProfile::LayerSplit& sp = m.layer_split[l];
  auto part = [](uint64_t bytes, int64_t num, int64_t den) {
    return den > 0 ? static_cast<uint64_t>(static_cast<double>(bytes) * num / den) : bytes;
  };
  return part(sp.heads, s.n_heads(), c.n_heads) + part(sp.kv, s.n_kv_heads(), c.n_kv_heads) +
         part(sp.ffn, s.ffn(), c.ffn_dim) + part(sp.experts, s.experts(), c.n_experts) + sp.whole;
}

uint64_t VocabShare(uint64_t bytes, const ModelConfig& c, const TpShard& s) {
  return static_cast<uint64_t>(static_cast<double>(bytes) * s.vocab() / c.vocab_size);
}

// What one rank of a worker of `tp` ranks pays, for the planner's first fit: per layer
// (weights and KV cache, averaged over the layers), for the embedding and the head, and
// for the activations of a middle and of the last stage (the largest rank's share).
struct RankCosts {
  double avg_layer = 0;
  uint64_t embedding = 0, head = 0, act_mid = 0, act_last = 0;
};

absl::StatusOr<RankCosts> CostsFor(const ModelProfile& m, const PlanLimits& lim, int tp) {
  const ModelConfig& c = m.config;
  const int L = static_cast<int>(m.layer_bytes.size());
  const int64_t kv_tokens = lim.KvTokens(c.context_length);
  RankCosts worst;
  for (int r = 0; r < tp; ++r) {
    TpShard shard;
    if (tp > 1) {
      CASCADE_ASSIGN_OR_RETURN(shard, MakeTpShard(c, r, tp));
    }
    const TpShard* sh = tp > 1 ? &shard : nullptr;
    uint64_t layers = 0;
    for (int l = 0; l < L; ++l) layers += sh ? LayerShare(m, l, shard) : m.layer_bytes[l];
    RankCosts rc;
    rc.avg_layer = static_cast<double>(layers) / L +
                   static_cast<double>(
                       EstimateStageMemory(c, {0, 1}, 0, kv_tokens, 0, sh, lim.kv_type).kv_cache);
    rc.embedding = sh ? VocabShare(m.embedding_bytes, c, shard) : m.embedding_bytes;
    rc.head = sh ? VocabShare(m.head_bytes, c, shard) : m.head_bytes;
    rc.act_mid = EstimateStageMemory(c, {0, 0}, 0, 0, lim.batch_tokens, sh).activations;
    rc.act_last = EstimateStageMemory(c, {0, L}, 0, 0, lim.batch_tokens, sh).activations;
    worst.avg_layer = std::max(worst.avg_layer, rc.avg_layer);
    worst.embedding = std::max(worst.embedding, rc.embedding);
    worst.head = std::max(worst.head, rc.head);
    worst.act_mid = std::max(worst.act_mid, rc.act_mid);
    worst.act_last = std::max(worst.act_last, rc.act_last);
  }
  return worst;
}

}  // namespace

absl::StatusOr<StageMemory> StageMemoryPerRank(const ModelProfile& m, LayerRange r,
                                               const PlanLimits& lim, int tp) {
  if (tp <= 1) return StageCost(m, r, lim);
  const ModelConfig& c = m.config;
  if (m.layer_split.size() != m.layer_bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: ", m.name, ": no per-tensor sizes to split over ", tp, " ranks"));
  }
  const bool first = r.first == 0, last = r.last == static_cast<int>(m.layer_bytes.size());
  StageMemory worst;
  for (int rank = 0; rank < tp; ++rank) {
    CASCADE_ASSIGN_OR_RETURN(TpShard shard, MakeTpShard(c, rank, tp));
    uint64_t w = 0;
    for (int l = r.first; l < r.last; ++l) w += LayerShare(m, l, shard);
    if (first) w += VocabShare(m.embedding_bytes, c, shard);
    if (last) w += VocabShare(m.head_bytes, c, shard);
    if (last && !first && c.tied_embeddings) w += VocabShare(m.embedding_bytes, c, shard);
    const StageMemory mem = EstimateStageMemory(c, r, w, lim.KvTokens(c.context_length),
                                                lim.batch_tokens, &shard, lim.kv_type);
    if (mem.total() > worst.total()) worst = mem;
  }
  return worst;
}

int64_t PlanLimits::KvTokens(int64_t model_context) const {
  if (kv_tokens > 0) return kv_tokens;
  return int64_t{kv_sequences > 0 ? kv_sequences : kAutoKvSequences} * Context(model_context);
}

uint64_t ModelProfile::total_bytes() const {
  return std::accumulate(layer_bytes.begin(), layer_bytes.end(), uint64_t{0}) + embedding_bytes +
         head_bytes;
}

ModelProfile ProfileFromSource(const ModelSource& source) {
  ModelProfile p;
  p.name = source.path();
  p.config = source.config();
  p.layer_bytes.assign(p.config.n_layers, 0);
  p.layer_split.assign(p.config.n_layers, {});
  for (const TensorView& t : source.tensors()) {
    if (t.name.rfind("blk.", 0) == 0) {
      const int l = std::atoi(t.name.c_str() + 4);
      if (l < 0 || l >= p.config.n_layers) continue;
      p.layer_bytes[l] += t.nbytes;
      ModelProfile::LayerSplit& sp = p.layer_split[l];
      const std::string& n = t.name;
      if (absl::StrContains(n, ".attn_q.") || absl::StrContains(n, ".attn_output.")) {
        sp.heads += t.nbytes;
      } else if (absl::StrContains(n, ".attn_k.") || absl::StrContains(n, ".attn_v.")) {
        sp.kv += t.nbytes;
      } else if (absl::StrContains(n, "_exps.")) {  // a rank keeps its share of the experts
        sp.experts += t.nbytes;
      } else if (absl::StrContains(n, ".ffn_") && !absl::StrContains(n, "_norm") &&
                 !absl::StrContains(n, "ffn_gate_inp") && !absl::StrContains(n, "_shexp")) {
        sp.ffn += t.nbytes;
      } else {
        sp.whole += t.nbytes;
      }
    } else if (t.name == "token_embd.weight") {
      p.embedding_bytes += t.nbytes;
    } else if (t.name == "output.weight" || t.name == "output_norm.weight") {
      p.head_bytes += t.nbytes;
    }
  }
  return p;
}

std::optional<WeightType> ParseWeightType(std::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(std::string(name));
  for (const Mix& m : kMixes) {
    if (upper == m.name) return WeightType{upper, m.type, m.bits_per_weight};
  }
  const std::optional<TensorType> t = ParseTensorTypeName(name);
  if (!t || !IsComputeSupported(*t)) return std::nullopt;
  return WeightType{TensorTypeName(*t), *t, BitsPerWeight(*t)};
}

std::vector<std::string> WeightTypeNames() {
  std::vector<std::string> out;
  for (TensorType t : ComputeTypes()) out.push_back(TensorTypeName(t));
  for (const Mix& m : kMixes) out.push_back(m.name);
  return out;
}

ModelProfile ProfileFromShape(const ModelShape& s, TensorType type) {
  return ProfileFromShape(s, WeightType{TensorTypeName(type), type, BitsPerWeight(type)});
}

ModelProfile ProfileFromShape(const ModelShape& s, const WeightType& type) {
  ModelProfile p;
  p.name = absl::StrCat(s.name, " (", type.name, ")");
  ModelConfig& c = p.config;
  c.arch = s.arch;
  c.vocab_size = s.vocab;
  c.dim = s.dim;
  c.n_layers = s.layers;
  c.n_heads = s.heads;
  c.n_kv_heads = s.kv_heads;
  c.head_dim = s.dim / s.heads;
  c.ffn_dim = s.ffn;
  c.context_length = s.context;
  c.rope_dim = c.head_dim;
  c.tied_embeddings = s.tied;
  c.qkv_bias = s.arch == "qwen2";
  const uint64_t layer =
      MatrixBytes(type, c.dim, c.q_dim()) + 2 * MatrixBytes(type, c.dim, c.kv_dim()) +
      MatrixBytes(type, c.q_dim(), c.dim) + 2 * MatrixBytes(type, c.dim, c.ffn_dim) +
      MatrixBytes(type, c.ffn_dim, c.dim) + 2 * 4 * c.dim +
      (c.qkv_bias ? 4 * (c.q_dim() + 2 * c.kv_dim()) : 0);
  p.layer_bytes.assign(c.n_layers, layer);
  ModelProfile::LayerSplit sp;
  sp.heads = MatrixBytes(type, c.dim, c.q_dim()) + MatrixBytes(type, c.q_dim(), c.dim) +
             (c.qkv_bias ? 4 * c.q_dim() : 0);
  sp.kv = 2 * MatrixBytes(type, c.dim, c.kv_dim()) + (c.qkv_bias ? 8 * c.kv_dim() : 0);
  sp.ffn = 2 * MatrixBytes(type, c.dim, c.ffn_dim) + MatrixBytes(type, c.ffn_dim, c.dim);
  sp.whole = 2 * 4 * c.dim;
  p.layer_split.assign(c.n_layers, sp);
  p.embedding_bytes = MatrixBytes(type, c.dim, c.vocab_size);
  p.head_bytes = 4 * c.dim + (s.tied ? 0 : MatrixBytes(type, c.dim, c.vocab_size));
  return p;
}

namespace {

// Each worker's usable memory: its share of its node, times the memory fraction.
std::vector<uint64_t> UsableMemory(const std::vector<WorkerSpec>& workers, const PlanLimits& lim) {
  std::vector<uint64_t> usable = SharedMemory(workers);
  for (uint64_t& u : usable) u = static_cast<uint64_t>(static_cast<double>(u) * lim.memory_fraction);
  return usable;
}

// The layers of each of k chosen workers (pipeline order), balanced by speed within what
// each holds (max_fit); empty when they cannot hold all L layers. Every stage gets one
// layer, then each further layer goes where it finishes soonest: a stage's time is its
// layers plus, on the last stage, the output head (in layers of the same byte size: decode
// runs it for every token), over the worker's speed. Giving unit jobs one at a time to the
// least-finished machine is optimal for the slowest stage, which sets the pipeline's pace.
std::vector<int> BalanceLayers(const std::vector<WorkerSpec>& workers,
                               const std::vector<int>& chosen, const std::vector<int>& max_fit,
                               int L, double head_layers) {
  const int k = static_cast<int>(chosen.size());
  auto stage_time = [&](int i, int layers) {
    const double extra = i == k - 1 ? head_layers : 0.0;
    return (layers + extra) / std::max(1e-9, workers[chosen[i]].gflops);
  };
  std::vector<int> alloc(k, 1);
  int total = k;
  while (total < L) {
    int best = -1;
    double best_time = 0;
    for (int i = 0; i < k; ++i) {
      if (alloc[i] >= max_fit[i]) continue;
      const double t = stage_time(i, alloc[i] + 1);
      if (best < 0 || t < best_time) {
        best = i;
        best_time = t;
      }
    }
    if (best < 0) return {};
    ++alloc[best];
    ++total;
  }
  return alloc;
}

// The fewest stages (from min_stages) over the workers by preference (`order`) that hold
// the model with a KV cache of exactly lim.kv_tokens positions; nullopt when none do.
absl::StatusOr<std::optional<Plan>> PlaceStages(const ModelProfile& m,
                                                const std::vector<WorkerSpec>& workers,
                                                const std::vector<uint64_t>& usable,
                                                const std::vector<int>& order,
                                                const PlanLimits& lim) {
  const int L = static_cast<int>(m.layer_bytes.size());
  // Each worker's per-rank costs (tensor-parallel workers pay a share of each).
  std::map<int, RankCosts> costs_by_tp;
  std::vector<RankCosts> cost(workers.size());
  for (size_t i = 0; i < workers.size(); ++i) {
    const int tp = std::max(1, workers[i].tp);
    if (!costs_by_tp.count(tp)) {
      absl::StatusOr<RankCosts> c = CostsFor(m, lim, tp);
      if (!c.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("plan: worker ", workers[i].id, ": ",
                                                       c.status().message()));
      }
      costs_by_tp[tp] = *c;
    }
    cost[i] = costs_by_tp[tp];
  }
  uint64_t layer_sum = 0;
  for (uint64_t b : m.layer_bytes) layer_sum += b;
  // The output head's work in layers (by weight bytes, which set decode's time per token);
  // with tied embeddings the head multiplies by the embedding matrix.
  const uint64_t head_work =
      m.head_bytes + (m.config.tied_embeddings ? m.embedding_bytes : uint64_t{0});
  const double head_layers =
      layer_sum > 0 ? static_cast<double>(head_work) * L / static_cast<double>(layer_sum) : 0;
  const int max_k = std::min<int>(static_cast<int>(workers.size()), L);
  for (int k = std::max(1, lim.min_stages); k <= max_k; ++k) {
    std::vector<int> chosen(order.begin(), order.begin() + k);
    std::sort(chosen.begin(), chosen.end());  // pipeline order = listed order
    // Fixed cost of each position and how many layers fit.
    std::vector<int> max_fit(k);
    int64_t fit_sum = 0;
    for (int i = 0; i < k; ++i) {
      // Activation workspace of a middle stage or of the last one (which adds logits).
      const RankCosts& rc = cost[chosen[i]];
      uint64_t fixed_bytes = i == k - 1 ? rc.act_last : rc.act_mid;
      if (i == 0) fixed_bytes += rc.embedding;
      if (i == k - 1) {
        fixed_bytes += rc.head + (m.config.tied_embeddings && k > 1 ? rc.embedding : 0);
      }
      const uint64_t cap = usable[chosen[i]];
      max_fit[i] = cap > fixed_bytes ? static_cast<int>(std::min<double>(
                                           L, (cap - fixed_bytes) / rc.avg_layer))
                                     : 0;
      fit_sum += max_fit[i];
    }
    if (fit_sum < L || *std::min_element(max_fit.begin(), max_fit.end()) < 1) continue;
    const std::vector<int> alloc = BalanceLayers(workers, chosen, max_fit, L, head_layers);
    if (alloc.empty()) continue;
    Plan plan;
    plan.kv_blocks = (lim.kv_tokens + lim.kv_block_size - 1) / lim.kv_block_size;
    plan.kv_block_size = lim.kv_block_size;
    plan.kv_type = lim.kv_type;
    plan.batch_tokens = lim.batch_tokens;
    int first = 0;
    bool fits = true;
    for (int i = 0; i < k; ++i) {
      StagePlan s;
      s.worker = chosen[i];
      s.layers = {first, first + alloc[i]};
      CASCADE_ASSIGN_OR_RETURN(
          s.memory, StageMemoryPerRank(m, s.layers, lim, std::max(1, workers[chosen[i]].tp)));
      s.capacity = usable[chosen[i]];
      fits &= s.memory.total() <= s.capacity;
      first += alloc[i];
      plan.stages.push_back(s);
    }
    if (fits) return plan;
  }
  return std::nullopt;
}

// The automatic KV cache: as many positions as the tightest stage of `plan` has room for,
// in whole blocks, at most max_sequences full-context sequences (and never fewer than the
// plan was placed with).
absl::StatusOr<Plan> FillKvCache(const ModelProfile& m, const std::vector<WorkerSpec>& workers,
                                 Plan plan, PlanLimits lim, int64_t context) {
  int64_t tokens = int64_t{std::max(1, lim.max_sequences)} * context;
  for (const StagePlan& s : plan.stages) {
    lim.kv_tokens = 1;
    CASCADE_ASSIGN_OR_RETURN(StageMemory one,
                             StageMemoryPerRank(m, s.layers, lim, std::max(1, workers[s.worker].tp)));
    const uint64_t fixed = one.total() - one.kv_cache;
    if (one.kv_cache == 0 || s.capacity <= fixed) continue;
    tokens = std::min<int64_t>(tokens, static_cast<int64_t>((s.capacity - fixed) / one.kv_cache));
  }
  plan.kv_blocks = std::max(plan.kv_blocks, tokens / lim.kv_block_size);
  lim.kv_tokens = plan.kv_tokens();
  for (StagePlan& s : plan.stages) {
    CASCADE_ASSIGN_OR_RETURN(s.memory,
                             StageMemoryPerRank(m, s.layers, lim, std::max(1, workers[s.worker].tp)));
  }
  return plan;
}

// The most KV positions (whole blocks) any plan holds, up to lim.kv_tokens; 0 when not even
// one block fits.
absl::StatusOr<int64_t> MostKvTokens(const ModelProfile& m, const std::vector<WorkerSpec>& workers,
                                     const std::vector<uint64_t>& usable,
                                     const std::vector<int>& order, PlanLimits lim) {
  int64_t lo = 0, hi = (lim.kv_tokens + lim.kv_block_size - 1) / lim.kv_block_size;
  while (lo < hi) {  // blocks: lo fit (or are 0), more than hi do not
    const int64_t mid = lo + (hi - lo + 1) / 2;
    lim.kv_tokens = mid * lim.kv_block_size;
    CASCADE_ASSIGN_OR_RETURN(std::optional<Plan> p, PlaceStages(m, workers, usable, order, lim));
    if (p) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo * lim.kv_block_size;
}

// The largest power of two no greater than x (>= 1).
int64_t FloorPow2(int64_t x) {
  int64_t p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

// Why no plan holds the model with lim.kv_tokens positions of KV, and what would fit.
absl::Status NoFit(const ModelProfile& m, const std::vector<WorkerSpec>& workers,
                   const std::vector<uint64_t>& usable, const std::vector<int>& order,
                   const PlanLimits& lim, int64_t context) {
  const int L = static_cast<int>(m.layer_bytes.size());
  const StageMemory need = StageCost(m, {0, L}, lim);
  uint64_t offered = 0;
  for (uint64_t u : usable) offered += u;
  const uint64_t biggest = *std::max_element(usable.begin(), usable.end());
  std::string why = absl::StrCat(
      "plan: ", m.name, " does not fit: it needs ", HumanBytes(need.weights), " of weights + ",
      HumanBytes(need.kv_cache), " of KV cache (", lim.kv_tokens, " tokens) + ",
      HumanBytes(need.activations), " of activations = ", HumanBytes(need.total()), "; the ",
      workers.size(), " worker(s) offer ", HumanBytes(offered), " in all (largest ",
      HumanBytes(biggest), ", ", lim.memory_fraction, " of each one's memory)");
  if (need.total() > offered) {
    absl::StrAppend(&why, ": short by ", HumanBytes(need.total() - offered));
  } else {
    absl::StrAppend(&why, ": the memory is there in total but no split into stages fits each ",
                    "worker");
  }
  const std::string more = absl::StrCat("more workers, or a larger --memory-fraction (now ",
                                        lim.memory_fraction, ")");
  CASCADE_ASSIGN_OR_RETURN(int64_t most, MostKvTokens(m, workers, usable, order, lim));
  if (most == 0) {
    absl::StrAppend(&why, ". The weights alone do not fit: try ", more,
                    ", or a smaller weight type");
    return absl::ResourceExhaustedError(why);
  }
  const int64_t seqs = std::max<int64_t>(1, lim.kv_tokens / context);
  absl::StrAppend(&why, ". KV for ", seqs, " sequence(s) of ", context, " positions is ",
                  HumanBytes(need.kv_cache), " at ", TensorTypeName(lim.kv_type),
                  "; these workers hold ", most, " positions: try ");
  if (most >= context) absl::StrAppend(&why, "--kv-sequences ", most / context, ", ");
  absl::StrAppend(&why, "--kv-tokens ", most);
  const int64_t ctx = FloorPow2(most / seqs);
  if (ctx < context) absl::StrAppend(&why, ", --ctx ", ctx, " (cascade plan)");
  if (lim.kv_type == TensorType::kF32) absl::StrAppend(&why, ", --kv-type f16 (half the KV)");
  absl::StrAppend(&why, ", or ", more);
  return absl::ResourceExhaustedError(why);
}

}  // namespace

absl::StatusOr<Plan> MakePlan(const ModelProfile& m, const std::vector<WorkerSpec>& workers,
                              const PlanLimits& lim) {
  const int L = static_cast<int>(m.layer_bytes.size());
  if (workers.empty()) return absl::FailedPreconditionError("plan: no workers are available");
  if (L == 0) return absl::InvalidArgumentError("plan: the model has no layers");
  const int64_t context = lim.Context(m.config.context_length);
  if (context <= 0 || lim.kv_block_size <= 0 || lim.batch_tokens <= 0) {
    return absl::InvalidArgumentError("plan: the context, KV block and batch sizes must be > 0");
  }
  if (!(lim.memory_fraction > 0 && lim.memory_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: the memory fraction ", lim.memory_fraction, " is not in (0, 1]"));
  }
  if (!IsKvCacheType(lim.kv_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: a KV cache of ", TensorTypeName(lim.kv_type), " (f32 or f16)"));
  }
  const int max_k = std::min<int>(static_cast<int>(workers.size()), L);
  if (lim.min_stages > max_k) {
    return absl::FailedPreconditionError(
        absl::StrCat("plan: ", lim.min_stages, " stages were asked for but there are ",
                     workers.size(), " workers and ", L, " layers"));
  }
  const std::vector<uint64_t> usable = UsableMemory(workers, lim);
  // Workers by preference: most memory, then fastest.
  std::vector<int> order(workers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (usable[a] != usable[b]) return usable[a] > usable[b];
    return workers[a].gflops > workers[b].gflops;
  });
  PlanLimits exact = lim;
  exact.kv_tokens = lim.KvTokens(m.config.context_length);
  if (!lim.auto_kv()) {
    CASCADE_ASSIGN_OR_RETURN(std::optional<Plan> plan,
                             PlaceStages(m, workers, usable, order, exact));
    if (plan) return *std::move(plan);
    return NoFit(m, workers, usable, order, exact, context);
  }
  // The automatic cache: the fewest stages that hold auto_kv_sequences sequences (no more
  // than the scheduler runs), else the fewest that hold one; then filled.
  for (int seqs : {std::max(1, std::min(lim.auto_kv_sequences, lim.max_sequences)), 1}) {
    exact.kv_tokens = int64_t{seqs} * context;
    CASCADE_ASSIGN_OR_RETURN(std::optional<Plan> plan,
                             PlaceStages(m, workers, usable, order, exact));
    if (plan) return FillKvCache(m, workers, *std::move(plan), exact, context);
  }
  return NoFit(m, workers, usable, order, exact, context);
}

absl::StatusOr<Plan> Replan(const ModelProfile& model, const Plan& old_plan,
                            const std::vector<WorkerSpec>& old_workers,
                            const std::vector<std::string>& lost,
                            const std::vector<WorkerSpec>& workers, const PlanLimits& limits) {
  auto index_of = [&](const std::string& id) -> int {
    for (size_t i = 0; i < workers.size(); ++i) {
      if (workers[i].id == id) return static_cast<int>(i);
    }
    return -1;
  };
  auto is_lost = [&](const std::string& id) {
    return std::find(lost.begin(), lost.end(), id) != lost.end();
  };
  // Substitution: surviving stages stay where they are, each lost one goes to the spare
  // with the most memory that holds it.
  Plan plan = old_plan;
  const std::vector<uint64_t> capacity = UsableMemory(workers, limits);
  std::vector<bool> used(workers.size(), false);
  bool substituted = true;
  for (StagePlan& st : plan.stages) {
    const std::string& id = old_workers[st.worker].id;
    if (is_lost(id)) continue;
    const int now = index_of(id);
    if (now < 0) {
      substituted = false;  // a survivor that is not offered any more
      break;
    }
    st.worker = now;
    used[now] = true;
  }
  if (substituted) {
    for (size_t i = 0; i < plan.stages.size(); ++i) {
      StagePlan& st = plan.stages[i];
      const std::string& was = old_workers[old_plan.stages[i].worker].id;
      if (!is_lost(was)) continue;
      int best = -1;
      for (size_t w = 0; w < workers.size(); ++w) {
        if (used[w] || is_lost(workers[w].id) || capacity[w] < st.memory.total() ||
            workers[w].tp != old_workers[old_plan.stages[i].worker].tp) {
          continue;
        }
        if (best < 0 || capacity[w] > capacity[best]) best = static_cast<int>(w);
      }
      if (best < 0) {
        substituted = false;
        break;
      }
      used[best] = true;
      st.worker = best;
      st.capacity = capacity[best];
    }
  }
  if (substituted) return plan;
  // A new plan over what there is.
  std::vector<WorkerSpec> usable;
  for (const WorkerSpec& w : workers) {
    if (!is_lost(w.id)) usable.push_back(w);
  }
  PlanLimits relaxed = limits;
  relaxed.min_stages = std::max(1, std::min<int>(limits.min_stages, static_cast<int>(usable.size())));
  auto fresh = MakePlan(model, usable, relaxed);
  if (!fresh.ok()) return fresh.status();
  // Indices into `workers`, as the caller gave them.
  for (StagePlan& st : fresh->stages) st.worker = index_of(usable[st.worker].id);
  return fresh;
}

std::vector<uint64_t> SharedMemory(const std::vector<WorkerSpec>& workers) {
  std::vector<uint64_t> out(workers.size());
  // Per node: the memory it has (what its sharers measured, the most of them), what was
  // given to workers there with a memory of their own, and the sharers.
  struct Node {
    uint64_t memory = 0, given = 0;
    std::vector<size_t> sharers;
  };
  std::map<std::string, Node> nodes;
  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerSpec& w = workers[i];
    out[i] = w.memory_bytes;
    if (w.node_id.empty()) continue;
    Node& n = nodes[w.node_id];
    if (w.node_memory) {
      n.memory = std::max(n.memory, w.memory_bytes);
      n.sharers.push_back(i);
    } else {
      n.given += w.memory_bytes * static_cast<uint64_t>(std::max(1, w.tp));
    }
  }
  for (const auto& [id, n] : nodes) {
    if (n.sharers.empty() || (n.sharers.size() == 1 && n.given == 0)) continue;
    const uint64_t left = n.memory > n.given ? n.memory - n.given : 0;
    uint64_t ranks = 0;
    for (size_t i : n.sharers) ranks += static_cast<uint64_t>(std::max(1, workers[i].tp));
    for (size_t i : n.sharers) out[i] = left / ranks;
  }
  return out;
}

std::string SharedNodesNote(const std::vector<WorkerSpec>& workers) {
  const std::vector<uint64_t> share = SharedMemory(workers);
  std::map<std::string, std::vector<size_t>> sharers;  // by node id
  for (size_t i = 0; i < workers.size(); ++i) {
    if (share[i] != workers[i].memory_bytes) sharers[workers[i].node_id].push_back(i);
  }
  std::string out;
  for (const auto& [id, idx] : sharers) {
    std::vector<std::string> names;
    uint64_t node_memory = 0;
    for (size_t i : idx) {
      names.push_back(workers[i].id);
      node_memory = std::max(node_memory, workers[i].memory_bytes);
    }
    const std::string& host = workers[idx[0]].node;
    absl::StrAppend(&out, "workers ", absl::StrJoin(names, ", "), " share node ",
                    host.empty() ? id : host, "'s ", HumanBytes(node_memory), ": ",
                    HumanBytes(share[idx[0]]), " each (less what workers there were given)\n");
  }
  return out;
}

std::string Plan::Table(const ModelProfile& m, const std::vector<WorkerSpec>& workers,
                        int64_t context) const {
  const std::vector<uint64_t> memory = SharedMemory(workers);
  // Columns sized to their widest cell. With tensor-parallel workers, a "ranks" column,
  // and the sizes are each rank's.
  bool split = false;
  for (const StagePlan& s : stages) split |= workers[s.worker].tp > 1;
  std::vector<std::vector<std::string>> rows = {{"stage", "worker", "node", "layers", "weights",
                                                 "kv cache", "activations", "total", "memory"}};
  if (split) {
    rows[0] = {"stage", "worker", "node", "layers", "ranks", "weights/rank", "kv cache/rank",
               "activations/rank", "total/rank", "memory/rank"};
  }
  for (size_t i = 0; i < stages.size(); ++i) {
    const StagePlan& s = stages[i];
    const WorkerSpec& w = workers[s.worker];
    std::vector<std::string> row = {absl::StrCat(i), w.id, w.node.empty() ? "-" : w.node,
                                    absl::StrCat("[", s.layers.first, ", ", s.layers.last, ")")};
    if (split) row.push_back(absl::StrCat(std::max(1, w.tp)));
    for (const std::string& cell :
         {HumanBytes(s.memory.weights), HumanBytes(s.memory.kv_cache),
          HumanBytes(s.memory.activations), HumanBytes(s.memory.total()),
          HumanBytes(memory[s.worker])}) {
      row.push_back(cell);
    }
    rows.push_back(std::move(row));
  }
  const size_t text_columns = split ? 5 : 4;
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  std::string out;
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) {
      const bool left = c < text_columns;  // text left-aligned, sizes right-aligned
      const std::string pad(width[c] - r[c].size(), ' ');
      absl::StrAppend(&out, c ? "  " : "", left ? r[c] + pad : pad + r[c]);
    }
    out += "\n";
  }
  absl::StrAppend(&out, m.name, ": ", m.config.n_layers, " layers, ", HumanBytes(m.total_bytes()),
                  " of weights; ", stages.size(), stages.size() == 1 ? " stage" : " stages", ", ",
                  kv_blocks, " KV blocks per stage\n");
  const int64_t ctx = context > 0 ? context : m.config.context_length;
  const int64_t full = kv_tokens() / ctx;
  absl::StrAppend(&out, "KV cache: ", kv_tokens(), " positions per stage (",
                  TensorTypeName(kv_type), ") = ", full, full == 1 ? " sequence" : " sequences",
                  " of ", ctx, " tokens\n", SharedNodesNote(workers));
  return out;
}

absl::StatusOr<std::vector<WorkerSpec>> ParseWorkerSpecs(const std::string& spec) {
  std::vector<WorkerSpec> out;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    WorkerSpec w;
    w.id = std::string(absl::StripAsciiWhitespace(kv.first));
    if (w.id.empty() || kv.second.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("worker spec '", std::string(item), "': expected name=memory[@gflops]"));
    }
    std::pair<std::string, std::string> mg = absl::StrSplit(kv.second, absl::MaxSplits('@', 1));
    auto mem = ParseBytes(mg.first);
    if (!mem.ok()) return mem.status();
    w.memory_bytes = *mem;
    if (!mg.second.empty() && (!absl::SimpleAtod(mg.second, &w.gflops) || w.gflops <= 0)) {
      return absl::InvalidArgumentError(absl::StrCat("worker spec '", std::string(item),
                                                     "': speed '", mg.second,
                                                     "' is not a positive number"));
    }
    out.push_back(w);
  }
  if (out.empty()) return absl::InvalidArgumentError("no workers in the spec");
  return out;
}

absl::StatusOr<ReplicaPlans> MakeReplicaPlans(const ModelProfile& model,
                                              const std::vector<WorkerSpec>& workers,
                                              const PlanLimits& limits, int replicas) {
  if (replicas < 0) {
    return absl::InvalidArgumentError(absl::StrCat("plan: ", replicas, " replicas"));
  }
  // Each worker with the memory it has among all of them (a node's memory is divided
  // among every worker there, whichever replica they end up in).
  std::vector<WorkerSpec> pool = workers;
  const std::vector<uint64_t> memory = SharedMemory(workers);
  for (size_t i = 0; i < pool.size(); ++i) {
    pool[i].memory_bytes = memory[i];
    pool[i].node_memory = false;
  }
  std::vector<int> left(workers.size());
  std::iota(left.begin(), left.end(), 0);
  PlanLimits each = limits;
  if (replicas != 1) each.auto_kv_sequences = 1;
  ReplicaPlans out;
  absl::Status next_failed;
  while (replicas == 0 || static_cast<int>(out.replicas.size()) < replicas) {
    std::vector<WorkerSpec> subset;
    for (int w : left) subset.push_back(pool[w]);
    absl::StatusOr<Plan> plan =
        subset.empty() ? absl::FailedPreconditionError("no workers are left")
                       : MakePlan(model, subset, each);
    if (!plan.ok()) {
      next_failed = plan.status();
      break;
    }
    std::set<int> used;
    for (StagePlan& st : plan->stages) {
      st.worker = left[st.worker];
      used.insert(st.worker);
    }
    std::erase_if(left, [&](int w) { return used.contains(w); });
    out.replicas.push_back(*std::move(plan));
  }
  if (out.replicas.empty()) return next_failed;
  if (replicas > 0 && static_cast<int>(out.replicas.size()) < replicas) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plan: ", replicas, " replicas were asked for but the workers hold ",
        out.replicas.size(), "; replica ", out.replicas.size(), ": ", next_failed.message()));
  }
  out.spares = std::move(left);
  return out;
}

std::string ReplicaPlans::Table(const ModelProfile& model, const std::vector<WorkerSpec>& workers,
                                int64_t context) const {
  std::string out;
  for (size_t r = 0; r < replicas.size(); ++r) {
    if (replicas.size() > 1) absl::StrAppend(&out, r ? "\n" : "", "replica ", r, ":\n");
    out += replicas[r].Table(model, workers, context);
  }
  if (!spares.empty()) {
    std::vector<std::string> ids;
    for (int w : spares) ids.push_back(workers[w].id);
    absl::StrAppend(&out, "spares: ", absl::StrJoin(ids, ", "), "\n");
  }
  return out;
}

}  // namespace cascade
