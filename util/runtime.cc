#include "util/runtime.h"

#include <malloc.h>

#include <cstdlib>

#include "absl/time/time.h"

namespace cascade {

void ConfigureRuntime() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr && std::getenv("GLIBC_TUNABLES") == nullptr) {
    mallopt(M_ARENA_MAX, kMallocArenas);
  }
}

HeapTrimmer::HeapTrimmer(std::chrono::milliseconds interval) {
  thread_ = std::thread([this, interval] {
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::FromChrono(interval))) return;
      }
      malloc_trim(0);  // unlocked: a destructor waits at most for the wake-up, not a trim
    }
  });
}

HeapTrimmer::~HeapTrimmer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

}  // namespace cascade
