// The memory's plain read rate, the ceiling of decode's weight streaming, as both
// engine_bench (GB/s next to the decode rates) and kernel_bench (BM_ReadRate next to
// BM_DecodeLayers) set figures against it: one rule, so the two report the same thing.
//
// ReadBuffer: `bytes` (rounded up to 2 MiB) from a cpu::WeightArena, the memory the CPU
// backend keeps weights in (2 MiB transparent huge pages), first touched by `pool` split as the
// kernels split rows. Read(pool) sweeps it once, one 64-byte line per step per thread, and
// returns a sum of what it read (keep it observable). Not thread-safe: one caller at a
// time; ok() is false where the allocation failed.
#ifndef CASCADE_BENCH_READ_RATE_H_
#define CASCADE_BENCH_READ_RATE_H_

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/weight_arena.h"
#include "util/thread_pool.h"

namespace cascade {

class ReadBuffer {
 public:
  ReadBuffer(size_t bytes, ThreadPool& pool);
  bool ok() const { return buf_ != nullptr; }
  size_t bytes() const { return bytes_; }
  uint64_t Read(ThreadPool& pool) const;

 private:
  size_t bytes_;
  cpu::WeightArena arena_;
  uint64_t* buf_;  // in arena_
};

// The best GB/s of `reps` sweeps of a fresh `bytes` buffer on `threads` threads (0 where
// the buffer could not be allocated).
double ReadGBps(int threads, size_t bytes, int reps);

}  // namespace cascade

#endif  // CASCADE_BENCH_READ_RATE_H_
