#include "kernels/cpu/weight_arena.h"

#include <sys/mman.h>

#include <algorithm>

namespace cascade::cpu {
namespace {

size_t RoundUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

}  // namespace

WeightArena::WeightArena(size_t chunk_bytes)
    : chunk_bytes_(RoundUp(std::max<size_t>(chunk_bytes, kHugePage), kHugePage)) {}

uint8_t* WeightArena::NewChunk(size_t bytes) {
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kHugePage, bytes));
  if (p == nullptr) return nullptr;
  ::madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without THP, 4 KiB pages
  chunks_.emplace_back(p);
  reserved_ += bytes;
  return p;
}

uint8_t* WeightArena::Allocate(size_t bytes) {
  const size_t need = RoundUp(std::max<size_t>(bytes, 1), kAlign);
  if (need >= chunk_bytes_ / 2) return NewChunk(RoundUp(need, kHugePage));  // its own
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
