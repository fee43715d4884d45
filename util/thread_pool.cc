#include "util/thread_pool.h"

#include <algorithm>

#include "absl/container/fixed_array.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CASCADE_CPU_RELAX() _mm_pause()
#else
#define CASCADE_CPU_RELAX() std::this_thread::yield()
#endif

namespace cascade {

namespace {

// Claims one unit of a ParallelForStealing segment word (front in the high 32 bits, back
// in the low): its front (the owner's order) or its back (another thread's); -1 when the
// segment is empty.
int64_t TakeUnit(std::atomic<uint64_t>& segment, bool front) {
  uint64_t v = segment.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t f = v >> 32, b = v & 0xFFFFFFFFu;
    if (f >= b) return -1;
    const uint64_t next = front ? (f + 1) << 32 | b : f << 32 | (b - 1);
    if (segment.compare_exchange_weak(v, next, std::memory_order_relaxed)) {
      return static_cast<int64_t>(front ? f : b - 1);
    }
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads, int spin_iterations)
    : num_threads_(std::max(1, num_threads)), spin_iterations_(std::max(0, spin_iterations)) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; gen == seen && i < spin_iterations_; ++i) {
      CASCADE_CPU_RELAX();
      gen = generation_.load(std::memory_order_acquire);
    }
    while (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(index, num_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::Run(absl::FunctionRef<void(int, int)> fn) {
  if (num_threads_ == 1) {
    fn(0, 1);
    return;
  }
  std::lock_guard<std::mutex> lock(run_mu_);
  job_ = &fn;
  pending_.store(num_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(0, num_threads_);
  int left = pending_.load(std::memory_order_acquire);
  for (int i = 0; left != 0 && i < spin_iterations_; ++i) {
    CASCADE_CPU_RELAX();
    left = pending_.load(std::memory_order_acquire);
  }
  while (left != 0) {
    pending_.wait(left, std::memory_order_acquire);
    left = pending_.load(std::memory_order_acquire);
  }
  job_ = nullptr;
}

void ThreadPool::SplitRange(int64_t count, int64_t grain, int t, int n, int64_t* begin,
                            int64_t* end) {
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (count + grain - 1) / grain;
  const int64_t base = units / n, extra = units % n;
  const int64_t ub = t * base + std::min<int64_t>(t, extra);
  const int64_t ue = ub + base + (t < extra ? 1 : 0);
  *begin = std::min(count, ub * grain);
  *end = std::min(count, ue * grain);
}

void ThreadPool::ParallelFor(int64_t count, int64_t grain,
                             absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (count <= 0) return;
  if (num_threads_ == 1 || count <= grain) {
    fn(0, count);
    return;
  }
  Run([&](int t, int n) {
    int64_t b, e;
    SplitRange(count, grain, t, n, &b, &e);
    if (b < e) fn(b, e);
  });
}

void ThreadPool::ParallelForDynamic(int64_t count, int64_t grain,
                                    absl::FunctionRef<void(int64_t, int64_t, int)> fn) {
  if (count <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (num_threads_ == 1 || count <= grain) {
    fn(0, count, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  Run([&](int t, int) {
    for (;;) {
      const int64_t b = next.fetch_add(grain, std::memory_order_relaxed);
      if (b >= count) return;
      fn(b, std::min(count, b + grain), t);
    }
  });
}

void ThreadPool::ParallelForStealing(int64_t count, int64_t grain,
                                     absl::FunctionRef<void(int64_t, int64_t, int)> fn) {
  if (count <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (count + grain - 1) / grain;
  if (num_threads_ == 1 || units <= 1) {
    fn(0, count, 0);
    return;
  }
  if (units >= (int64_t{1} << 31)) {  // the packed segment words below hold 32-bit indices
    ParallelForDynamic(count, grain, fn);
    return;
  }
  // Segment t: its units [front, back) not yet claimed, front in the high 32 bits. On the
  // stack for up to 16 threads: this runs for every decode matmul.
  absl::FixedArray<std::atomic<uint64_t>, 16> segments(num_threads_);
  for (int t = 0; t < num_threads_; ++t) {
    int64_t b, e;
    SplitRange(units, 1, t, num_threads_, &b, &e);
    segments[t].store(static_cast<uint64_t>(b) << 32 | static_cast<uint64_t>(e),
                      std::memory_order_relaxed);
  }
  auto piece = [&](int64_t unit, int thread) {
    fn(unit * grain, std::min(count, (unit + 1) * grain), thread);
  };
  Run([&](int t, int n) {
    for (int64_t u; (u = TakeUnit(segments[t], /*front=*/true)) >= 0;) piece(u, t);
    for (int k = 1; k < n; ++k) {
      for (int64_t u; (u = TakeUnit(segments[(t + k) % n], /*front=*/false)) >= 0;) piece(u, t);
    }
  });
}

}  // namespace cascade
