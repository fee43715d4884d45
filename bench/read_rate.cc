#include "bench/read_rate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace cascade {

ReadBuffer::ReadBuffer(size_t bytes, ThreadPool& pool)
    : bytes_((bytes + cpu::kHugePageBytes - 1) / cpu::kHugePageBytes * cpu::kHugePageBytes),
      buf_(reinterpret_cast<uint64_t*>(arena_.Allocate(bytes_))) {
  if (buf_ == nullptr) return;
  uint64_t* p = buf_;
  pool.ParallelFor(static_cast<int64_t>(bytes_ / 8), 4096, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) p[i] = static_cast<uint64_t>(i);
  });
}

uint64_t ReadBuffer::Read(ThreadPool& pool) const {
  const int64_t lines = static_cast<int64_t>(bytes_ / 64);
  std::vector<uint64_t> sums(pool.num_threads(), 0);
  const uint64_t* p = buf_;
  pool.Run([&](int t, int n) {
    int64_t lo, hi;
    ThreadPool::SplitRange(lines, 1, t, n, &lo, &hi);
    uint64_t a[8] = {};
    for (int64_t i = lo * 8; i < hi * 8; i += 8) {  // one 64-byte line per step
      for (int j = 0; j < 8; ++j) a[j] += p[i + j];
    }
    for (int j = 0; j < 8; ++j) sums[t] += a[j];
  });
  uint64_t sum = 0;
  for (uint64_t v : sums) sum += v;
  return sum;
}

double ReadGBps(int threads, size_t bytes, int reps) {
  ThreadPool pool(threads);
  const ReadBuffer buf(bytes, pool);
  if (!buf.ok()) return 0;
  double best = 0;
  uint64_t sink = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    sink += buf.Read(pool);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(buf.bytes()) / sec / 1e9);
  }
  if (sink == 1) std::printf("?");  // keep the reads observable
  return best;
}

}  // namespace cascade
