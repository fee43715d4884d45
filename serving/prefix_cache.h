// PrefixCache: the scheduler's books of the KV blocks a pipeline keeps cached, so that a
// request whose prompt starts like an earlier one skips the prefill of those blocks.
//
// A full block of block_size tokens is named by a hash chain: NameOf(parent's name, the
// block's tokens), 128 bits of XXH3 (libxxhash), the first block's parent being the
// zero name. A name therefore stands for the whole prefix up to the block, and every
// stage of the pipeline keeps the block under the same name (engine/kv_cache.h), told by
// the frames the scheduler sends. Each entry also keeps its parent's name and its tokens,
// which Match compares: two prefixes whose names collide never share a block.
//
// Reference counts say how many running sequences use a block; a block no sequence uses
// stays cached ("idle") until EvictIdle takes it, least recently used first. A sequence
// releases its blocks last to first, so a prefix's later blocks go before its first ones.
//
// The scheduler counts cached blocks against the pipeline's KV budget beside the blocks
// its sequences reserve. The books may be wrong about a stage (an eviction or a
// publication lost with a failed batch): a stage that lacks a block refuses the batch,
// and the scheduler sends the sequence again without the prefix (serving/scheduler.h).
//
// Not thread-safe: owned by the scheduler thread.
#ifndef CASCADE_SERVING_PREFIX_CACHE_H_
#define CASCADE_SERVING_PREFIX_CACHE_H_

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "generation/batch.h"

namespace cascade {

class PrefixCache {
 public:
  explicit PrefixCache(int block_size) : block_size_(block_size) {}

  static BlockName NameOf(const BlockName& parent, std::span<const int32_t> block_tokens);

  int block_size() const { return block_size_; }
  // The cached blocks `tokens` starts with, at most max_blocks, first to last; each gains a
  // reference.
  std::vector<BlockName> Match(std::span<const int32_t> tokens, int64_t max_blocks);
  // Caches a block (one reference, or idle with `referenced` false). False when the name
  // is cached already: the caller's block stays its own.
  bool Insert(const BlockName& name, const BlockName& parent, std::span<const int32_t> tokens,
              bool referenced);
  // Drops one reference from each (unknown names are skipped), last to first.
  void Release(std::span<const BlockName> names);
  // Forgets a name whatever its references (its users keep their blocks on the stages).
  void Forget(const BlockName& name);
  // Takes up to n idle blocks, least recently used first, and returns their names.
  std::vector<BlockName> EvictIdle(int64_t n);
  void Clear();

  bool Contains(const BlockName& name) const { return entries_.contains(name); }
  int64_t RefCount(const BlockName& name) const;
  int64_t blocks() const { return static_cast<int64_t>(entries_.size()); }
  int64_t idle_blocks() const { return static_cast<int64_t>(idle_.size()); }
  int64_t referenced_blocks() const { return blocks() - idle_blocks(); }

 private:
  struct Entry {
    BlockName parent;
    std::vector<int32_t> tokens;
    int64_t refs = 0;
    uint64_t idle_tick = 0;  // key in idle_ while refs == 0
  };
  void MakeIdle(const BlockName& name, Entry& e);

  const int block_size_;
  absl::flat_hash_map<BlockName, Entry> entries_;
  std::map<uint64_t, BlockName> idle_;  // by the tick they became idle: LRU first
  uint64_t tick_ = 0;
};

}  // namespace cascade

#endif  // CASCADE_SERVING_PREFIX_CACHE_H_
