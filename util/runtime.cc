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
    absl::MutexLock lock(&mu_);
    while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::FromChrono(interval))) {
      malloc_trim(0);
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
