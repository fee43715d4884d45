#include "engine/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cascade {

KvCache::KvCache(const KvCacheOptions& options)
    : options_(options),
      layer_bytes_(options.num_blocks * options.block_size * options.n_kv_heads * options.head_dim *
                   static_cast<int64_t>(KvElementBytes(options.type))) {
  free_.reserve(options.num_blocks);
  Clear();
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
  kv->backend_ = &backend;
  if (options.resident) {
    for (DeviceBuffer* pool : {&kv->k_, &kv->v_}) {
      if (absl::Status st = backend.MakeResident(*pool); !st.ok()) {
        return absl::ResourceExhaustedError(
            absl::StrCat("KV cache of ", options.num_blocks, " blocks: ", st.message()));
      }
    }
  }
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
  int64_t needed = 0;
  const int bs = options_.block_size;
  for (auto& [seq, run] : runs) {
    auto it = seqs_.find(seq);
    const int32_t length = it == seqs_.end() ? 0 : it->second.length;
    const int32_t have = it == seqs_.end() ? 0 : static_cast<int32_t>(it->second.blocks.size());
    if (run.first > length) {
      return absl::InvalidArgumentError(absl::StrCat("batch: sequence ", seq,
                                                     " starts at position ", run.first,
                                                     " but holds only ", length, " tokens"));
    }
    for (int32_t b = run.first / bs; b < have && b <= (run.next - 1) / bs; ++b) {
      if (blocks_[it->second.blocks[b]].refs > 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "batch: sequence ", seq, " would overwrite its block ", b,
            ", which other sequences share (a cached prefix)"));
      }
    }
    SeqChange c;
    c.seq = seq;
    c.new_length = run.next;
    c.blocks_needed = (run.next + bs - 1) / bs;
    if (c.blocks_needed > have) needed += c.blocks_needed - have;
    plan.changes.push_back(c);
  }
  // Blocks released by rewinds go back first (as Apply returns them), so that the
  // allocation below can use them; then idle cached blocks, least recently used first.
  std::vector<int32_t> pool(free_.begin(), free_.end());
  for (const SeqChange& c : plan.changes) {
    auto it = seqs_.find(c.seq);
    if (it == seqs_.end()) continue;
    for (size_t b = c.blocks_needed; b < it->second.blocks.size(); ++b) {
      const BlockState& st = blocks_[it->second.blocks[b]];
      if (st.refs == 1 && !st.named) {
        pool.push_back(it->second.blocks[b]);
      }
    }
  }
  if (needed > static_cast<int64_t>(pool.size()) + idle_cached_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache full: the batch needs ", needed, " more blocks, ", free_blocks(), " of ",
        options_.num_blocks, " are free and ", idle_cached_, " cached ones unused"));
  }
  plan.new_blocks = needed;
  plan.from_free = std::min<int64_t>(needed, static_cast<int64_t>(pool.size()));
  for (int64_t i = 0; i < plan.from_free; ++i) {
    plan.alloc.push_back(pool.back());
    pool.pop_back();
  }
  for (int32_t b : IdleLru(needed - plan.from_free)) plan.alloc.push_back(b);
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
      plan.slot_rows[i] = static_cast<int64_t>(table[pos / bs]) * bs + pos % bs;
    }
  }
  return plan;
}

std::vector<int32_t> KvCache::IdleLru(int64_t n) const {
  std::vector<int32_t> idle;
  if (n <= 0) return idle;
  for (const auto& [name, b] : cached_) {
    if (blocks_[b].refs == 0) idle.push_back(b);
  }
  const size_t k = std::min<size_t>(idle.size(), static_cast<size_t>(n));
  std::partial_sort(idle.begin(), idle.begin() + k, idle.end(), [&](int32_t a, int32_t b) {
    return std::pair(blocks_[a].idle_since, a) < std::pair(blocks_[b].idle_since, b);
  });
  idle.resize(k);
  return idle;
}

void KvCache::Ref(int32_t b) {
  if (blocks_[b].refs++ == 0) --idle_cached_;  // a cached block no sequence used
}

void KvCache::Unref(int32_t b) {
  BlockState& st = blocks_[b];
  if (--st.refs > 0) return;
  if (st.named) {
    st.idle_since = ++tick_;
    ++idle_cached_;
  } else {
    free_.push_back(b);
  }
}

void KvCache::Unname(int32_t b) {
  BlockState& st = blocks_[b];
  cached_.erase(st.name);
  st.named = false;
  --idle_cached_;
}

void KvCache::Apply(const Plan& plan) {
  // Mirror PlanBatch: rewound blocks are released in the same order, then the planned
  // blocks come off the free list's top, then idle cached blocks lose their names.
  for (const SeqChange& c : plan.changes) {
    auto it = seqs_.find(c.seq);
    if (it == seqs_.end()) continue;
    auto& blocks = it->second.blocks;
    for (size_t b = c.blocks_needed; b < blocks.size(); ++b) Unref(blocks[b]);
    if (static_cast<int32_t>(blocks.size()) > c.blocks_needed) blocks.resize(c.blocks_needed);
  }
  free_.resize(free_.size() - plan.from_free);
  for (size_t i = plan.from_free; i < plan.alloc.size(); ++i) Unname(plan.alloc[i]);
  for (int32_t b : plan.alloc) blocks_[b].refs = 1;
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
  for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) Unref(*b);
  seqs_.erase(it);
}

void KvCache::Clear() {
  seqs_.clear();
  free_.clear();
  cached_.clear();
  idle_cached_ = 0;
  blocks_.assign(options_.num_blocks, BlockState{});
  for (int64_t b = options_.num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

absl::Status KvCache::AttachPrefix(const PrefixAttach& a) {
  const int64_t n = static_cast<int64_t>(a.blocks.size());
  const int bs = options_.block_size;
  if (a.partial_rows < 0 || a.partial_rows >= bs) {
    return absl::InvalidArgumentError(absl::StrCat("prefix of sequence ", a.seq, ": ",
                                                   a.partial_rows, " rows of a block of ", bs));
  }
  if (n * bs + a.partial_rows >= options_.max_positions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefix of ", n, " blocks and ", a.partial_rows, " rows for sequence ", a.seq,
        " fills the context of ", options_.max_positions, " tokens"));
  }
  // Every block it names, before anything changes.
  auto find = [&](const BlockName& name) -> int32_t {
    auto c = cached_.find(name);
    return c == cached_.end() ? -1 : c->second;
  };
  std::vector<int32_t> table;
  for (int64_t i = 0; i < n; ++i) {
    table.push_back(find(a.blocks[i]));
    if (table.back() < 0) {
      return absl::NotFoundError(absl::StrCat("prefix cache miss: block ", i, " of ", n,
                                              " for sequence ", a.seq,
                                              " is not cached on this stage"));
    }
  }
  const int32_t source = a.partial_rows > 0 ? find(a.partial) : -1;
  if (a.partial_rows > 0 && source < 0) {
    return absl::NotFoundError(absl::StrCat("prefix cache miss: the partial block for sequence ",
                                            a.seq, " is not cached on this stage"));
  }
  if (auto it = seqs_.find(a.seq); it != seqs_.end()) {
    const auto& have = it->second.blocks;
    if (have.size() < table.size() + (source >= 0 ? 1 : 0) ||
        !std::equal(table.begin(), table.end(), have.begin())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sequence ", a.seq, " exists on this stage without the prefix it is sent with"));
    }
    return absl::OkStatus();  // sent again (a batch sent again after a timeout)
  }
  int32_t own = -1;
  if (source >= 0) {
    Ref(source);  // not taken below as an idle block
    if (!free_.empty()) {
      own = free_.back();
      free_.pop_back();
    } else if (const std::vector<int32_t> idle = IdleLru(1); !idle.empty()) {
      own = idle.front();
      Unname(own);
    }
    if (own >= 0) {
      blocks_[own].refs = 1;
      CopyRows(source, own, a.partial_rows);
    }
    Unref(source);
    if (own < 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "KV cache full: no block for the partial prefix of sequence ", a.seq));
    }
  }
  for (int32_t b : table) Ref(b);
  SeqState& st = seqs_[a.seq];
  st.blocks = std::move(table);
  if (own >= 0) st.blocks.push_back(own);
  st.length = static_cast<int32_t>(n * bs + a.partial_rows);
  return absl::OkStatus();
}

void KvCache::CopyRows(int32_t from, int32_t to, int32_t rows) {
  const KvLayout l = layout();
  const size_t bytes = static_cast<size_t>(rows) * l.head_dim * l.element_bytes();
  const int64_t bs = options_.block_size;
  for (int layer = 0; layer < options_.n_layers; ++layer) {
    for (char* pool : {static_cast<char*>(keys(layer)), static_cast<char*>(values(layer))}) {
      for (int h = 0; h < options_.n_kv_heads; ++h) {
        backend_->CopyOnDevice(pool + l.Offset(to * bs, h) * l.element_bytes(),
                               pool + l.Offset(from * bs, h) * l.element_bytes(), bytes);
      }
    }
  }
}

absl::Status KvCache::Publish(const BlockPublish& p) {
  auto it = seqs_.find(p.seq);
  const int64_t full = it == seqs_.end() ? 0 : it->second.length / options_.block_size;
  if (p.block < 0 || p.block >= full) {
    return absl::InvalidArgumentError(absl::StrCat("cannot cache block ", p.block,
                                                   " of sequence ", p.seq, ": it holds ",
                                                   full, " full blocks"));
  }
  if (cached_.contains(p.name)) return absl::OkStatus();
  BlockState& st = blocks_[it->second.blocks[p.block]];
  if (st.named) {
    return absl::FailedPreconditionError(absl::StrCat("block ", p.block, " of sequence ", p.seq,
                                                      " is cached under another name"));
  }
  st.named = true;
  st.name = p.name;
  cached_.emplace(p.name, it->second.blocks[p.block]);
  return absl::OkStatus();
}

void KvCache::Evict(const BlockName& name) {
  auto c = cached_.find(name);
  if (c == cached_.end()) return;
  const int32_t b = c->second;
  cached_.erase(c);
  blocks_[b].named = false;
  if (blocks_[b].refs == 0) {
    --idle_cached_;
    free_.push_back(b);
  }
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
