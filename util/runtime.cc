#include "util/runtime.h"

#include "absl/synchronization/mutex.h"

namespace cascade {

void ConfigureRuntime() { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); }

}  // namespace cascade
