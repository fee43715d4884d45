#include "util/runtime.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

// Locks two mutexes in one order, then in the other, and exits 0. Debian's Abseil (built
// without NDEBUG) kills the process at the second order ("dying due to potential
// deadlock") unless deadlock detection is off.
void InvertLockOrderAndExit() {
  absl::Mutex a, b;
  a.Lock();
  b.Lock();
  b.Unlock();
  a.Unlock();
  b.Lock();
  a.Lock();
  a.Unlock();
  b.Unlock();
  std::exit(0);
}

TEST(Runtime, AbseilDeadlockDetectionIsOff) {
  EXPECT_EXIT(
      {
        ConfigureRuntime();
        InvertLockOrderAndExit();
      },
      ::testing::ExitedWithCode(0), "");
}

// The sanitizers' allocators ignore malloc_trim (gcc names them one way, clang another).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizedMalloc = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
constexpr bool kSanitizedMalloc = true;
#else
constexpr bool kSanitizedMalloc = false;
#endif
#else
constexpr bool kSanitizedMalloc = false;
#endif

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// Memory freed inside the heap (below a block still in use, so malloc cannot shrink the
// heap's top by itself) goes back to the system within the trimmer's interval.
TEST(Runtime, TheHeapTrimmerReturnsFreedHeapPages) {
  if (kSanitizedMalloc) GTEST_SKIP() << "a sanitizer's allocator does not trim";
  constexpr size_t kBlocks = 64 * 1024, kBlockBytes = 1024;  // 64 MiB in small blocks
  std::vector<std::unique_ptr<char[]>> blocks;
  std::unique_ptr<char[]> pin;
  // On a thread of its own, as gRPC's threads allocate: the blocks land in its arena.
  std::thread([&] {
    for (size_t i = 0; i < kBlocks; ++i) {
      blocks.emplace_back(new char[kBlockBytes]);
      std::fill_n(blocks.back().get(), kBlockBytes, static_cast<char>(i));
    }
    pin.reset(new char[kBlockBytes]);
    pin[0] = 1;
    blocks.clear();
  }).join();
  const int64_t before = ResidentBytes();
  HeapTrimmer trimmer(std::chrono::milliseconds(20));
  int64_t after = before;
  for (int i = 0; i < 100 && before - after < 32 << 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    after = ResidentBytes();
  }
  EXPECT_GE(before - after, 32 << 20) << "resident " << before << " -> " << after << " bytes";
  EXPECT_EQ(pin[0], 1);
}

}  // namespace
}  // namespace cascade
