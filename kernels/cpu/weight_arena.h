// WeightArena: the memory a CpuBackend copies its weights into, handed out back to back
// from large chunks that are aligned to, and advised into, 2 MiB transparent huge pages.
//
// Why: decode streams every weight from memory once per token, and in 4 KiB pages it runs
// ~10-15% slower than in 2 MiB pages (TLB misses, and the hardware prefetchers stop at
// each page end). A model's small matrices (llama-110m's 768 x 768 attention weights, a
// 1.1B model's K/V projections) are each under one huge page: one allocation per weight
// either left them in small pages or wasted most of a huge page on each. Packed together
// they share huge pages (in file order within a shared chunk).
//
// Contract: Allocate(bytes) returns 64-byte aligned, uninitialised memory that stays
// valid, and is freed, with the arena; nothing is freed alone. A chunk is only reserved
// address space until written (pages are faulted in as the weights are copied), so an
// unused chunk tail costs at most the one huge page it was left in. Not thread-safe: one
// thread uploads a backend's weights. Failure: nullptr when the system refuses memory.
#ifndef CASCADE_KERNELS_CPU_WEIGHT_ARENA_H_
#define CASCADE_KERNELS_CPU_WEIGHT_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace cascade::cpu {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` rounded up to whole 2 MiB pages, aligned to and advised into transparent huge
// pages (a hint: without THP the kernel gives 4 KiB pages), uninitialised; free it with
// std::free. nullptr when the system refuses memory or the rounding would overflow. The
// weight arena's chunks; CpuBackend's large buffers (the KV cache's pools) are mapped
// the same way but fresh, so that their zero pages are resident only once written.
void* AllocateHugePages(size_t bytes);

class WeightArena {
 public:
  static constexpr size_t kAlign = 64;
  // chunk_bytes: the size of the chunks shared by weights (a multiple of kHugePageBytes);
  // a weight of half a chunk or more gets a chunk of its own.
  explicit WeightArena(size_t chunk_bytes = size_t{64} << 20);

  uint8_t* Allocate(size_t bytes);

  size_t chunks() const { return chunks_.size(); }
  size_t reserved_bytes() const { return reserved_; }  // address space of all chunks

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  // A chunk of `bytes` (a multiple of kHugePageBytes), or nullptr.
  uint8_t* NewChunk(size_t bytes);

  size_t chunk_bytes_;
  std::vector<std::unique_ptr<uint8_t[], FreeDeleter>> chunks_;
  uint8_t* next_ = nullptr;  // the shared chunk's first free byte
  size_t left_ = 0;          // and how many follow it
  size_t reserved_ = 0;
};

}  // namespace cascade::cpu

#endif  // CASCADE_KERNELS_CPU_WEIGHT_ARENA_H_
