#include "engine/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cascade {

KvCache::KvCache(const KvCacheOptions& options)
    : options_(options),
      layer_bytes_(options.num_blocks * options.block_size * options.n_kv_heads * options.head_dim *
                   static_cast<int64_t>(KvElementBytes(options.type))) {
  free_.reserve(options.num_blocks);
  for (int64_t b = options.num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const KvCacheOptions& options,
                                                         Backend& backend) {
  if (options.n_layers <= 0 || options.n_kv_heads <= 0 || options.head_dim <= 0 ||
      options.block_size <= 0 || options.num_blocks <= 0 || options.max_positions <= 0) {
    return absl::InvalidArgumentError("KV cache: every dimension must be positive");
  }
  if (!IsKvCacheType(options.type)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache: element type ", TensorTypeName(options.type), " is not supported (f32 or f16)"));
  }
  std::unique_ptr<KvCache> kv(new KvCache(options));
  const size_t bytes = BytesFor(options) / 2;
  auto k = backend.Allocate(bytes);
  if (!k.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache: cannot allocate 2 x ", bytes, " bytes: ", k.status().message()));
  }
  auto v = backend.Allocate(bytes);
  if (!v.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache: cannot allocate 2 x ", bytes, " bytes: ", v.status().message()));
  }
  kv->k_ = std::move(*k);
  kv->v_ = std::move(*v);
  return kv;
}

uint64_t KvCache::BytesFor(const KvCacheOptions& o) {
  return 2ull * KvElementBytes(o.type) * o.n_layers * o.num_blocks * o.block_size * o.n_kv_heads *
         o.head_dim;
}

absl::StatusOr<KvCache::Plan> KvCache::PlanBatch(std::span<const TokenSlot> slots) const {
  Plan plan;
  plan.slot_rows.resize(slots.size());
  // Per sequence in the batch: first position, count, and the slots that belong to it.
  struct Run {
    int32_t first = 0;
    int32_t next = 0;
    std::vector<size_t> slot_indices;
  };
  std::map<SeqId, Run> runs;
  for (size_t i = 0; i < slots.size(); ++i) {
    const TokenSlot& s = slots[i];
    auto [it, inserted] = runs.try_emplace(s.seq);
    Run& run = it->second;
    if (inserted) {
      run.first = s.pos;
      run.next = s.pos;
    }
    if (s.pos != run.next) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch: sequence ", s.seq, " has position ", s.pos, " where ", run.next,
                       " was expected (positions of a sequence must be consecutive)"));
    }
    if (s.pos < 0 || s.pos >= options_.max_positions) {
      return absl::InvalidArgumentError(absl::StrCat("batch: sequence ", s.seq, " position ", s.pos,
                                                     " is outside the context of ",
                                                     options_.max_positions, " tokens"));
    }
    run.next = s.pos + 1;
    run.slot_indices.push_back(i);
  }
  int64_t freed = 0, needed = 0;
  for (auto& [seq, run] : runs) {
    auto it = seqs_.find(seq);
    const int32_t length = it == seqs_.end() ? 0 : it->second.length;
    const int32_t have = it == seqs_.end() ? 0 : static_cast<int32_t>(it->second.blocks.size());
    if (run.first > length) {
      return absl::InvalidArgumentError(absl::StrCat("batch: sequence ", seq,
                                                     " starts at position ", run.first,
                                                     " but holds only ", length, " tokens"));
    }
    SeqChange c;
    c.seq = seq;
    c.new_length = run.next;
    c.blocks_needed = (run.next + options_.block_size - 1) / options_.block_size;
    if (c.blocks_needed > have) {
      needed += c.blocks_needed - have;
    } else {
      freed += have - c.blocks_needed;
    }
    plan.changes.push_back(c);
  }
  if (needed > free_blocks() + freed) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: the batch needs ", needed,
                                                     " more blocks, ", free_blocks(), " of ",
                                                     options_.num_blocks, " are free"));
  }
  // Blocks released by rewinds go back first, so that the allocation below can use them.
  std::vector<int32_t> pool(free_.begin(), free_.end());
  for (const SeqChange& c : plan.changes) {
    auto it = seqs_.find(c.seq);
    if (it == seqs_.end()) continue;
    for (size_t b = c.blocks_needed; b < it->second.blocks.size(); ++b) {
      pool.push_back(it->second.blocks[b]);
    }
  }
  plan.new_blocks = needed;
  for (int64_t i = 0; i < needed; ++i) {
    plan.alloc.push_back(pool.back());
    pool.pop_back();
  }
  // Slot rows: existing blocks first, then the newly allocated ones in change order.
  size_t next_alloc = 0;
  for (const SeqChange& c : plan.changes) {
    std::vector<int32_t> table;
    auto it = seqs_.find(c.seq);
    if (it != seqs_.end()) {
      table.assign(
          it->second.blocks.begin(),
          it->second.blocks.begin() + std::min<size_t>(it->second.blocks.size(), c.blocks_needed));
    }
    while (static_cast<int32_t>(table.size()) < c.blocks_needed) {
      table.push_back(plan.alloc[next_alloc++]);
    }
    for (size_t i : runs[c.seq].slot_indices) {
      const int32_t pos = slots[i].pos;
      plan.slot_rows[i] =
          static_cast<int64_t>(table[pos / options_.block_size]) * options_.block_size +
          pos % options_.block_size;
    }
  }
  return plan;
}

void KvCache::Apply(const Plan& plan) {
  // Mirror PlanBatch: rewound blocks join the free list in the same order, then the
  // planned blocks come off its top.
  for (const SeqChange& c : plan.changes) {
    auto it = seqs_.find(c.seq);
    if (it == seqs_.end()) continue;
    auto& blocks = it->second.blocks;
    for (size_t b = c.blocks_needed; b < blocks.size(); ++b) free_.push_back(blocks[b]);
    if (static_cast<int32_t>(blocks.size()) > c.blocks_needed) blocks.resize(c.blocks_needed);
  }
  free_.resize(free_.size() - plan.alloc.size());
  size_t next_alloc = 0;
  for (const SeqChange& c : plan.changes) {
    SeqState& st = seqs_[c.seq];
    while (static_cast<int32_t>(st.blocks.size()) < c.blocks_needed) {
      st.blocks.push_back(plan.alloc[next_alloc++]);
    }
    st.length = c.new_length;
  }
}

void KvCache::Free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  free_.insert(free_.end(), it->second.blocks.rbegin(), it->second.blocks.rend());
  seqs_.erase(it);
}

void KvCache::Clear() {
  seqs_.clear();
  free_.clear();
  for (int64_t b = options_.num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int32_t KvCache::Length(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

const std::vector<int32_t>& KvCache::BlockTable(SeqId seq) const {
  static const std::vector<int32_t> kEmpty;
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? kEmpty : it->second.blocks;
}

}  // namespace cascade
