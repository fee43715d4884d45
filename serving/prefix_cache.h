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
// Not thread-safe: owned by the scheduler thread. Its PrefixView (optional) mirrors the
// names it holds for other threads (routing): every change of the cache updates it.
#ifndef CASCADE_SERVING_PREFIX_CACHE_H_
#define CASCADE_SERVING_PREFIX_CACHE_H_

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "generation/batch.h"

namespace cascade {

// The names a PrefixCache holds, readable from any thread: how much of a prompt a
// pipeline holds, for routing (serving/router.h). A guess: it may be stale at once.
class PrefixView {
 public:
  // Leading tokens of `prompt` held, in whole blocks (0 without a cache).
  int64_t CachedTokens(std::span<const int32_t> prompt) const ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets every name; the names to come are of blocks of `block_size` (0: no cache).
  void Reset(int block_size) ABSL_LOCKS_EXCLUDED(mu_);
  void Add(const BlockName& name) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(std::span<const BlockName> names) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_set<BlockName> names_ ABSL_GUARDED_BY(mu_);
  int block_size_ ABSL_GUARDED_BY(mu_) = 0;
};

class PrefixCache {
 public:
  // `view` (may be null) must outlive the cache; it is reset to this block size.
  PrefixCache(int block_size, PrefixView* view);

  static BlockName NameOf(const BlockName& parent, std::span<const int32_t> block_tokens);
  // The names of the first full blocks of `tokens` (at most max_blocks), the first block's
  // parent being `parent` (the zero name: `tokens` starts a sequence).
  static std::vector<BlockName> ChainNames(std::span<const int32_t> tokens, int block_size,
                                           int64_t max_blocks, BlockName parent = {});

  int block_size() const { return block_size_; }
  // How many of `names` (ChainNames of `tokens`) lead `tokens` in the cache, their tokens
  // compared; each of those gains a reference.
  int64_t Match(std::span<const int32_t> tokens, std::span<const BlockName> names);
  // Where a prompt parts from a cached block: of the blocks cached after `parent`, the one
  // whose tokens begin with the longest run of `next`'s tokens, at most max_rows (fewer
  // than a block), and that run's length (rows 0: no block begins with next's first
  // token). A block found gains a reference. Its first `rows` positions hold the KV
  // entries the prompt needs there (causal: a position's entries depend on the tokens up
  // to it), so a sequence may start from a copy of them (engine/kv_cache.h).
  struct PartialHit {
    BlockName name;
    int32_t rows = 0;
  };
  PartialHit MatchPartial(const BlockName& parent, std::span<const int32_t> next,
                          int32_t max_rows);
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
  // Drops `name` (whose entry is e) from its parent's children.
  void Unlink(const BlockName& name, const Entry& e);

  const int block_size_;
  PrefixView* const view_;
  absl::flat_hash_map<BlockName, Entry> entries_;
  absl::flat_hash_map<BlockName, std::vector<BlockName>> children_;  // by parent
  std::map<uint64_t, BlockName> idle_;  // by the tick they became idle: LRU first
  uint64_t tick_ = 0;
};

}  // namespace cascade

#endif  // CASCADE_SERVING_PREFIX_CACHE_H_
