// Paged KV cache of one pipeline stage: for each of the stage's layers, a pool of
// fixed-size blocks of keys and values; each sequence owns a list of blocks (its block
// table). Changes happen in two steps, as in llama.cpp: Plan() works out where every
// token of a batch goes and whether the blocks exist, without changing anything; Apply()
// commits a plan. So a batch that does not fit is refused whole and nothing leaks.
//
// Contract:
// - Memory is allocated once, on the backend's device, by Create: (layers, num_blocks,
//   kv_heads, block_size, head_dim) elements of options.type (F32, or F16 at half the
//   bytes) for K and the same for V. The block bookkeeping lives on the host.
// - A sequence's tokens occupy positions [0, length). A batch may append to a sequence
//   (first position == length) or rewind it (first position < length: later positions
//   are dropped, e.g. to re-run a step after a failure).
// - Not thread-safe: owned and used by one stage executor thread.
#ifndef CASCADE_ENGINE_KV_CACHE_H_
#define CASCADE_ENGINE_KV_CACHE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

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
    int64_t new_blocks = 0;          // blocks taken from the free list
    std::vector<int32_t> alloc;      // the physical blocks to take, in order
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

  // Releases all blocks of a sequence (no-op if unknown).
  void Free(SeqId seq);
  void Clear();

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

  explicit KvCache(const KvCacheOptions& options);

  KvCacheOptions options_;
  int64_t layer_bytes_;
  DeviceBuffer k_, v_;
  std::vector<int32_t> free_;  // stack of free blocks; lowest index on top
  std::map<SeqId, SeqState> seqs_;
};

}  // namespace cascade

#endif  // CASCADE_ENGINE_KV_CACHE_H_
