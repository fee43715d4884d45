// Paged KV cache of one pipeline stage: for each of the stage's layers, a pool of
// fixed-size blocks of keys and values; each sequence owns a list of blocks (its block
// table). Changes happen in two steps, as in llama.cpp: Plan() works out where every
// token of a batch goes and whether the blocks exist, without changing anything; Apply()
// commits a plan. So a batch that does not fit is refused whole and nothing leaks.
//
// Contract:
// - Memory is allocated once, on the backend's device, by Create: (layers, num_blocks,
//   kv_heads, block_size, head_dim) elements of options.type (F32, or F16 at half the
//   bytes) for K and the same for V, made resident there when options.resident. The
//   block bookkeeping lives on the host.
// - A sequence's tokens occupy positions [0, length). A batch may append to a sequence
//   (first position == length) or rewind it (first position < length: later positions
//   are dropped, e.g. to re-run a step after a failure).
// - Prefix cache: a full block may be cached under a name (generation/batch.h BlockName,
//   chosen by the coordinator). Blocks are reference-counted: a sequence that starts
//   from cached blocks (AttachPrefix) shares them with every other sequence that does;
//   the rows it takes from a block it does not share whole (where its prompt parts from
//   the cached one) are copied into a block of its own.
//   A batch never writes into a block another sequence shares (InvalidArgument). A named
//   block no sequence uses stays cached until Evict names it, or until a batch needs a
//   block and none is free: then the least recently used of them is taken (the
//   coordinator's books, serving/prefix_cache.h, normally evict first; this only reclaims
//   names the coordinator never learnt of, e.g. from a batch that failed further on).
// - Not thread-safe: owned and used by one stage executor thread.
#ifndef CASCADE_ENGINE_KV_CACHE_H_
#define CASCADE_ENGINE_KV_CACHE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "generation/batch.h"
#include "kernels/backend.h"

namespace cascade {

struct KvCacheOptions {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = kDefaultKvBlockSize;
  int64_t num_blocks = 0;
  int64_t max_positions = 0;  // per sequence (the model's context length)
  TensorType type = TensorType::kF32;  // element type (IsKvCacheType)
  // Back the whole pool with memory at Create (Backend::MakeResident): a planned cache takes
  // its memory at load, so a machine that cannot back it fails there, not while serving,
  // and a server's memory does not grow as blocks are first used. Otherwise a block's
  // pages are taken when first written.
  bool resident = false;
};

class KvCache {
 public:
  struct SeqChange {
    SeqId seq = 0;
    int32_t new_length = 0;
    int32_t blocks_needed = 0;  // total blocks after the change
  };
  struct Plan {
    std::vector<SeqChange> changes;
    std::vector<int64_t> slot_rows;  // per batch slot: block * block_size + offset
    int64_t new_blocks = 0;          // blocks taken for the batch
    std::vector<int32_t> alloc;      // the physical blocks to take, in order
    int64_t from_free = 0;           // alloc's first from_free come off the free list, the
                                     // rest are idle cached blocks whose names are dropped
  };

  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const KvCacheOptions& options,
                                                         Backend& backend);

  // Bytes a cache of these dimensions takes.
  static uint64_t BytesFor(const KvCacheOptions& options);

  // Checks the batch against the cache and works out slot placement. InvalidArgument for
  // positions that are not consecutive or skip ahead of a sequence's length, or run past
  // max_positions; ResourceExhausted when there are not enough free blocks.
  absl::StatusOr<Plan> PlanBatch(std::span<const TokenSlot> slots) const;
  void Apply(const Plan& plan);

  // Releases all blocks of a sequence (no-op if unknown): each loses a reference; an
  // unnamed block no sequence uses is free again, a named one stays cached.
  void Free(SeqId seq);
  void Clear();

  // Prefix cache (see the contract). AttachPrefix starts `a.seq` from the cached blocks
  // a.blocks, and with a.partial_rows > 0 a block of its own holding a copy of the first
  // rows of cached block a.partial (taken as a batch takes blocks: ResourceExhausted when
  // none is free or idle): NotFound naming the first block this cache lacks (nothing
  // changes); for a sequence that exists already, OK when its first blocks are those,
  // else FailedPrecondition.
  absl::Status AttachPrefix(const PrefixAttach& a);
  // Caches full block p.block of p.seq under p.name. A name already cached stays as it
  // is (this block stays private); InvalidArgument when the block is not full or absent.
  absl::Status Publish(const BlockPublish& p);
  // Drops a name (no-op if unknown); the block is free once no sequence uses it.
  void Evict(const BlockName& name);
  bool IsCached(const BlockName& name) const { return cached_.contains(name); }
  int64_t cached_blocks() const { return static_cast<int64_t>(cached_.size()); }
  // Named blocks no sequence uses (taken when no block is free).
  int64_t idle_cached_blocks() const { return idle_cached_; }
  // Sequences using physical block b.
  int32_t RefCount(int32_t b) const { return blocks_[b].refs; }

  bool Has(SeqId seq) const { return seqs_.count(seq) != 0; }
  int32_t Length(SeqId seq) const;
  const std::vector<int32_t>& BlockTable(SeqId seq) const;
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_blocks() const { return options_.num_blocks; }
  size_t num_sequences() const { return seqs_.size(); }
  const KvCacheOptions& options() const { return options_; }

  int64_t kv_dim() const { return static_cast<int64_t>(options_.n_kv_heads) * options_.head_dim; }
  // Where the pools keep their elements (backend.h).
  KvLayout layout() const {
    return {options_.n_kv_heads, options_.head_dim, options_.block_size, options_.type};
  }
  // Base of layer l's pools, laid out as layout() says.
  void* keys(int layer) { return k_.as<char>() + layer * layer_bytes_; }
  void* values(int layer) { return v_.as<char>() + layer * layer_bytes_; }

 private:
  struct SeqState {
    int32_t length = 0;
    std::vector<int32_t> blocks;
  };
  struct BlockState {
    int32_t refs = 0;
    bool named = false;
    BlockName name;
    uint64_t idle_since = 0;  // tick when its last user left (named blocks)
  };

  explicit KvCache(const KvCacheOptions& options);
  // Adds a reference to cached block b (no longer idle). Drops one reference to block b;
  // at zero it is free (unnamed) or idle (named).
  void Ref(int32_t b);
  void Unref(int32_t b);
  // Idle cached blocks, least recently used first, at most n.
  std::vector<int32_t> IdleLru(int64_t n) const;
  // An idle cached block loses its name (it is taken for a sequence).
  void Unname(int32_t b);
  // Copies positions [0, rows) of block `from` into block `to`, every layer, K and V.
  void CopyRows(int32_t from, int32_t to, int32_t rows);

  KvCacheOptions options_;
  int64_t layer_bytes_;
  DeviceBuffer k_, v_;
  Backend* backend_ = nullptr;  // the pools' (Create's); it outlives the cache
  std::vector<int32_t> free_;  // stack of free blocks; lowest index on top
  std::map<SeqId, SeqState> seqs_;
  std::vector<BlockState> blocks_;  // per physical block
  absl::flat_hash_map<BlockName, int32_t> cached_;
  int64_t idle_cached_ = 0;
  uint64_t tick_ = 0;
};

}  // namespace cascade

#endif  // CASCADE_ENGINE_KV_CACHE_H_
