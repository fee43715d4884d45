#include "kernels/cpu/weight_arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <limits>
#include <utility>

namespace cascade::cpu {
namespace {

size_t RoundUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

}  // namespace

void* AllocateHugePages(size_t bytes) {
  if (bytes > std::numeric_limits<size_t>::max() - kHugePageBytes) return nullptr;
  const size_t rounded = RoundUp(std::max<size_t>(bytes, 1), kHugePageBytes);
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
  if (p != nullptr) ::madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

WeightArena::WeightArena(size_t chunk_bytes)
    : chunk_bytes_(RoundUp(std::max<size_t>(chunk_bytes, kHugePageBytes), kHugePageBytes)) {}

uint8_t* WeightArena::NewChunk(size_t bytes) {
  std::unique_ptr<uint8_t[], FreeDeleter> p(static_cast<uint8_t*>(AllocateHugePages(bytes)));
  if (p == nullptr) return nullptr;
  chunks_.push_back(std::move(p));
  reserved_ += bytes;
  return chunks_.back().get();
}

uint8_t* WeightArena::Allocate(size_t bytes) {
  // Too close to SIZE_MAX to round up to a huge page.
  if (bytes > std::numeric_limits<size_t>::max() - kHugePageBytes) return nullptr;
  const size_t need = RoundUp(std::max<size_t>(bytes, 1), kAlign);
  if (need >= chunk_bytes_ / 2) return NewChunk(RoundUp(need, kHugePageBytes));  // its own
  if (need > left_) {
    uint8_t* p = NewChunk(chunk_bytes_);
    if (p == nullptr) return nullptr;
    next_ = p;
    left_ = chunk_bytes_;
  }
  uint8_t* out = next_;
  next_ += need;
  left_ -= need;
  return out;
}

}  // namespace cascade::cpu
