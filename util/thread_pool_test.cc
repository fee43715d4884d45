#include "util/thread_pool.h"

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cascade {
namespace {

TEST(ThreadPool, RunCallsEveryThreadOnce) {
  ThreadPool pool(3);
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<std::atomic<int>> hits(3);
    pool.Run([&](int t, int n) {
      EXPECT_EQ(n, 3);
      hits[t].fetch_add(1);
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, ParallelForCoversRangeExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int64_t count : {0, 1, 7, 64, 1000}) {
      for (int64_t grain : {1, 8, 32}) {
        std::vector<std::atomic<int>> seen(count);
        pool.ParallelFor(count, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
        });
        for (int64_t i = 0; i < count; ++i) ASSERT_EQ(seen[i].load(), 1) << i;
      }
    }
  }
}

// For ParallelForDynamic and ParallelForStealing (`method`): every item passed exactly
// once, each piece within the grain and starting on it (one whole call where the split
// makes none), thread indices in range.
template <class Method>
void ExpectPiecesCoverRangeOnce(Method method) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t count : {0, 1, 7, 64, 1000}) {
      for (int64_t grain : {1, 8, 32}) {
        std::vector<std::atomic<int>> seen(count);
        std::atomic<int> bad{0};
        method(pool, count, grain, [&](int64_t b, int64_t e, int t) {
          const bool whole = b == 0 && e == count && (threads == 1 || count <= grain);
          if (t < 0 || t >= threads || (!whole && (e - b > grain || b % grain != 0))) {
            bad.fetch_add(1);
          }
          for (int64_t i = b; i < e; ++i) seen[i].fetch_add(1);
        });
        EXPECT_EQ(bad.load(), 0) << threads << " threads, count " << count << ", grain " << grain;
        for (int64_t i = 0; i < count; ++i) ASSERT_EQ(seen[i].load(), 1) << i;
      }
    }
  }
}

TEST(ThreadPool, ParallelForDynamicCoversRangeExactlyOnce) {
  ExpectPiecesCoverRangeOnce([](ThreadPool& pool, int64_t count, int64_t grain, auto&& fn) {
    pool.ParallelForDynamic(count, grain, fn);
  });
}

TEST(ThreadPool, ParallelForStealingCoversRangeExactlyOnce) {
  ExpectPiecesCoverRangeOnce([](ThreadPool& pool, int64_t count, int64_t grain, auto&& fn) {
    pool.ParallelForStealing(count, grain, fn);
  });
}

// Thread 1 holds its first piece until thread 0 has taken a piece of thread 1's segment
// (bounded wait), so the only way the range finishes is thread 0 working through the rest
// of that segment from its back; each thread keeps to its own segment otherwise.
TEST(ThreadPool, ParallelForStealingFinishesAStalledThreadsSegment) {
  ThreadPool pool(2);
  constexpr int64_t kCount = 64, kGrain = 4;  // segments [0, 32) and [32, 64)
  std::vector<std::atomic<int>> by(kCount);
  std::atomic<int> stolen{0};
  pool.ParallelForStealing(kCount, kGrain, [&](int64_t b, int64_t e, int t) {
    if (t == 0 && b >= kCount / 2) stolen.fetch_add(1);
    if (t == 1 && b == kCount / 2) {
      for (int i = 0; i < 10000 && stolen.load() == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    for (int64_t i = b; i < e; ++i) by[i].store(t + 1);
  });
  EXPECT_GT(stolen.load(), 0);
  for (int64_t i = 0; i < kCount / 2; ++i) EXPECT_EQ(by[i].load(), 1) << i;
  // Thread 0 took segment 1 from its back: what it took is a run at the end.
  int64_t first_stolen = kCount;
  for (int64_t i = kCount / 2; i < kCount; ++i) {
    ASSERT_NE(by[i].load(), 0) << i;
    if (by[i].load() == 1 && first_stolen == kCount) first_stolen = i;
  }
  for (int64_t i = first_stolen; i < kCount; ++i) EXPECT_EQ(by[i].load(), 1) << i;
}

TEST(ThreadPool, SplitRangeRespectsGrain) {
  int64_t covered = 0;
  for (int t = 0; t < 3; ++t) {
    int64_t b, e;
    ThreadPool::SplitRange(100, 8, t, 3, &b, &e);
    if (b < e && e != 100) {
      EXPECT_EQ(e % 8, 0);
    }
    EXPECT_EQ(b, covered);
    covered = e;
  }
  EXPECT_EQ(covered, 100);
}

}  // namespace
}  // namespace cascade
