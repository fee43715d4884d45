// Process-wide runtime settings that every Cascade binary applies first thing in main.
//
// - Abseil's Mutex deadlock detection is turned off. Debian builds Abseil without NDEBUG,
//   which leaves detection on: every absl::Mutex lock (gRPC's core locks are absl::Mutex)
//   then updates a global lock-order graph and records stack traces, and an inverted lock
//   order anywhere aborts the process. Profiles of a 3-stage pipeline showed that graph's
//   functions among gRPC's own; serving code has no use for a debugging aid that can kill
//   it. Tests and sanitizer builds keep their own checks (TSan finds lock inversions).
//
// Contract: call once, from main, before any other thread starts. Not thread-safe.
#ifndef CASCADE_UTIL_RUNTIME_H_
#define CASCADE_UTIL_RUNTIME_H_

namespace cascade {

void ConfigureRuntime();

}  // namespace cascade

#endif  // CASCADE_UTIL_RUNTIME_H_
