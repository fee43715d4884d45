// Internal: one KV block's rows of one KV head, as the attention kernels read them.
//
// Contract: KvBlockRows returns the K and V rows of positions [0, count) of `block` for KV
// head `kvh` as floats, `stride` (head_dim) floats apart: with an F32 cache the pool's own
// rows (no copy; KvLayout keeps them together), with an F16 cache the rows converted into
// buf (2 * block_size * head_dim floats: K, then V) by ToFloat, which must convert exactly
// (as Fp16ToFloat). The F32 algorithm then runs on either, so an F16
// cache's result is the F32 kernel's on the converted values, bit for bit across ISAs.
// Header-only, pure, thread-safe (it writes only buf).
#ifndef CASCADE_KERNELS_CPU_KV_BLOCK_H_
#define CASCADE_KERNELS_CPU_KV_BLOCK_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/backend.h"
#include "kernels/cpu/prefetch.h"

namespace cascade::cpu {

struct KvRows {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t stride = 0;  // floats between positions
};

// Extra scratch floats an attention group needs for p's cache (0 for F32).
inline size_t KvBlockScratchFloats(const AttentionParams& p) {
  return p.kv_type == TensorType::kF16
             ? 2 * static_cast<size_t>(p.block_size) * static_cast<size_t>(p.head_dim)
             : 0;
}

// Element offset of (block, kvh, position 0, element 0) in a pool.
inline int64_t KvBlockBase(const AttentionParams& p, int32_t block, int kvh) {
  return p.kv_layout().Offset(static_cast<int64_t>(block) * p.block_size, kvh);
}

// ToFloat(src, n, dst): dst[i] = the F16 value src[i] as a float, for i < n.
template <void (*ToFloat)(const uint16_t*, int64_t, float*)>
KvRows KvBlockRows(const AttentionParams& p, int32_t block, int kvh, int count, float* buf) {
  const int64_t hd = p.head_dim;
  const int64_t base = KvBlockBase(p, block, kvh);
  if (p.kv_type != TensorType::kF16) {
    return {static_cast<const float*>(p.k_pool) + base, static_cast<const float*>(p.v_pool) + base,
            hd};
  }
  float* k = buf;
  float* v = buf + static_cast<int64_t>(p.block_size) * hd;
  ToFloat(static_cast<const uint16_t*>(p.k_pool) + base, count * hd, k);
  ToFloat(static_cast<const uint16_t*>(p.v_pool) + base, count * hd, v);
  return {k, v, hd};
}

// The first byte of `block`'s positions of KV head kvh in a pool, and how many bytes
// `count` of them take (for prefetching).
inline const void* KvBlockAddress(const AttentionParams& p, const void* pool, int32_t block,
                                  int kvh) {
  return static_cast<const char*>(pool) +
         KvBlockBase(p, block, kvh) * static_cast<int64_t>(p.kv_layout().element_bytes());
}
inline size_t KvBlockBytes(const AttentionParams& p, int count) {
  return static_cast<size_t>(count) * static_cast<size_t>(p.head_dim) *
         p.kv_layout().element_bytes();
}

// The block after the one starting at position `start` of q's sequence (if any), K and V
// rows of KV head kvh, prefetched into L2 in `slices` pieces while the kernel works on the
// current block: Issue(i) before step i of `slices` steps. A sequence's blocks lie anywhere
// in the pool, so the hardware prefetcher cannot run ahead across them; the whole next
// block into L1 filled the miss buffers, and into L2 in one burst at the block's start it
// still stalled there (docs/benchmarks.md, 2026-12-03).
class NextBlockPrefetch {
 public:
  NextBlockPrefetch(const AttentionParams& p, const AttentionQuery& q, int32_t start, int kvh,
                    int slices) {
    if (start + p.block_size >= q.n_ctx) return;
    const int32_t next = q.blocks[start / p.block_size + 1];
    bytes_ = KvBlockBytes(p, std::min(p.block_size, q.n_ctx - start - p.block_size));
    k_ = static_cast<const char*>(KvBlockAddress(p, p.k_pool, next, kvh));
    v_ = static_cast<const char*>(KvBlockAddress(p, p.v_pool, next, kvh));
    slice_ = (bytes_ + static_cast<size_t>(slices) - 1) / static_cast<size_t>(slices);
  }
  void Issue(int i) const {
    const size_t from = slice_ * static_cast<size_t>(i);
    if (from >= bytes_) return;
    const size_t n = bytes_ - from < slice_ ? bytes_ - from : slice_;
    PrefetchBytes<CacheLevel::kL2>(k_ + from, n);
    PrefetchBytes<CacheLevel::kL2>(v_ + from, n);
  }

 private:
  const char* k_ = nullptr;
  const char* v_ = nullptr;
  size_t bytes_ = 0, slice_ = 0;
};

}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_KV_BLOCK_H_
