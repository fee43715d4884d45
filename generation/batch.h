// Batches: the unit of work of a forward pass. A batch is a flat list of token slots,
// each naming its sequence and position, so prefill chunks and decode steps of many
// sequences share one pass (continuous batching, chunked prefill, pipeline micro-batches).
//
// Contract: plain data. Within a batch, the slots of one sequence must have consecutive,
// increasing positions (Stage::Forward checks this, and everything else, before it runs).
#ifndef CASCADE_GENERATION_BATCH_H_
#define CASCADE_GENERATION_BATCH_H_

#include <compare>
#include <cstdint>
#include <utility>
#include <vector>

namespace cascade {

using SeqId = int64_t;

// Defaults of the two sizes every layer agrees on (planner, scheduler, stage): tokens per
// KV-cache block, and tokens per forward pass. Written once, here. 32 tokens a block, not
// 16: a sequence's blocks lie anywhere in the pool, and the CPU attention reads each one
// as a fresh stream the prefetchers must find again; kernel_bench BM_Attention (Zen 4,
// 2026-12-02) 1.05-1.17x faster at 32 than at 16, 1.14-1.27x at 64. A sequence strands
// up to block - 1 tokens of KV memory (31 here); --kv-block-size sets it per cluster.
constexpr int kDefaultKvBlockSize = 32;
constexpr int64_t kDefaultMaxBatchTokens = 512;

struct TokenSlot {
  int32_t token = 0;         // input token id (read by the first stage only)
  SeqId seq = 0;             // sequence the token belongs to
  int32_t pos = 0;           // position of the token in its sequence
  bool want_logits = false;  // the last stage returns logits for this slot
};

using Batch = std::vector<TokenSlot>;

// The prefix cache (serving/prefix_cache.h names blocks; engine/kv_cache.h keeps them).
// A full KV block is named by 128 bits that the coordinator derives from the block's
// tokens and its parent's name, so a name stands for the whole prefix up to and including
// the block, and two blocks of one name hold the same keys and values on a stage.
struct BlockName {
  uint64_t hi = 0, lo = 0;
  friend bool operator==(const BlockName&, const BlockName&) = default;
  friend auto operator<=>(const BlockName&, const BlockName&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const BlockName& n) {
    return H::combine(std::move(h), n.hi, n.lo);
  }
};

// A sequence new to a stage that starts from cached blocks: its first blocks.size()
// blocks are these, and its length blocks.size() * block_size. With partial_rows > 0 its
// next block is its own copy of the first partial_rows rows (positions) of cached block
// `partial`, whose tokens begin as the sequence's next ones (a block shared up to where
// two prompts part), and its length partial_rows more.
struct PrefixAttach {
  SeqId seq = 0;
  std::vector<BlockName> blocks;
  BlockName partial;
  int32_t partial_rows = 0;
};

// After the batch, block `block` of `seq` (full by then) is cached under `name`.
struct BlockPublish {
  SeqId seq = 0;
  int32_t block = 0;
  BlockName name;
};

}  // namespace cascade

#endif  // CASCADE_GENERATION_BATCH_H_
