// A fixed-size fork-join thread pool for the compute kernels.
//
// Contract:
// - ThreadPool(n) uses the calling thread plus n-1 worker threads; n >= 1.
// - Run(fn) calls fn(i, n) once on each of the n threads (the caller runs i = 0) and
//   returns when every call has returned. Runs are serialized: concurrent callers wait
//   for each other (one stage executor normally owns a pool).
// - Idle workers sleep on a futex (std::atomic::wait) after a short bounded spin (about
//   50 us on current x86 cores: long enough to catch the next matmul of a decode step, short
//   enough that a pool never burns a core that another process on a small shared machine
//   needs).
// - fn must not throw and must not call Run on the same pool (that would deadlock).
#ifndef CASCADE_UTIL_THREAD_POOL_H_
#define CASCADE_UTIL_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace cascade {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads, int spin_iterations = 2048);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  int num_threads() const { return num_threads_; }

  void Run(absl::FunctionRef<void(int thread, int num_threads)> fn);

  // Splits [0, count) into num_threads() contiguous ranges of nearly equal size whose
  // inner boundaries are multiples of `grain`, and calls fn(begin, end) for each non-empty
  // range, in parallel. The split depends only on (count, grain, num_threads()).
  void ParallelFor(int64_t count, int64_t grain,
                   absl::FunctionRef<void(int64_t begin, int64_t end)> fn);

  // Splits [0, count) into chunks of `grain` items (the last may be shorter) that the
  // threads, the caller included, claim one at a time, and calls fn(begin, end, thread)
  // for each chunk. A worker that wakes late just claims fewer chunks, so the caller never
  // waits for a share it could have done itself. Which thread runs which chunk varies.
  // With one thread, or count <= grain, it is a single call fn(0, count, 0).
  void ParallelForDynamic(int64_t count, int64_t grain,
                          absl::FunctionRef<void(int64_t begin, int64_t end, int thread)> fn);

  // Splits [0, count) as ParallelFor does, one contiguous segment per thread, and lets
  // each thread work through its own segment front to back in pieces of `grain` items
  // (fn(begin, end, thread) per piece; inner piece boundaries are multiples of grain). A
  // thread done with its segment takes pieces from the back of the others', so a thread
  // that starts late or runs slow is helped without the threads' reads interleaving (each
  // reads its segment in order, as one stream, until the last pieces). Every item is
  // passed exactly once. With one thread, or count <= grain, it is a single call
  // fn(0, count, 0).
  void ParallelForStealing(int64_t count, int64_t grain,
                           absl::FunctionRef<void(int64_t begin, int64_t end, int thread)> fn);

  // The range that ParallelFor gives to thread `t` of `n`.
  static void SplitRange(int64_t count, int64_t grain, int t, int n, int64_t* begin, int64_t* end);

 private:
  void WorkerLoop(int index);

  const int num_threads_;
  const int spin_iterations_;
  std::mutex run_mu_;  // serializes Run()
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const absl::FunctionRef<void(int, int)>* job_ = nullptr;  // valid during a Run
  std::vector<std::thread> workers_;
};

}  // namespace cascade

#endif  // CASCADE_UTIL_THREAD_POOL_H_
