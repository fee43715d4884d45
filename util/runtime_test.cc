#include "util/runtime.h"

#include <cstdlib>

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

}  // namespace
}  // namespace cascade
