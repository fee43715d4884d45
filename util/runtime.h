// Process-wide runtime settings that every Cascade binary applies first thing in main,
// and the heap trimmer its long-running servers keep.
//
// - Abseil's Mutex deadlock detection is turned off. Debian builds Abseil without NDEBUG,
//   which leaves detection on: every absl::Mutex lock (gRPC's core locks are absl::Mutex)
//   then updates a global lock-order graph and records stack traces, and an inverted lock
//   order anywhere aborts the process. Profiles of a 3-stage pipeline showed that graph's
//   functions among gRPC's own; serving code has no use for a debugging aid that can kill
//   it. Tests and sanitizer builds keep their own checks (TSan finds lock inversions).
// - glibc's malloc keeps at most kMallocArenas arenas (M_ARENA_MAX), unless the
//   MALLOC_ARENA_MAX environment variable or GLIBC_TUNABLES chose otherwise. Its default,
//   8 per core, gives each of gRPC's short-lived threads an arena of its own whose freed
//   memory stays with it; the 10-minute soak (docs/benchmarks.md) saw workers keep a few
//   MiB more after each fault. The threads that allocate on the serving path are gRPC's and
//   the stage executor's; the compute threads allocate nothing.
// - HeapTrimmer returns the free pages of every arena to the system (malloc_trim) every
//   interval, so a server's resident memory follows what it uses, not its peak.
//
// Contract: ConfigureRuntime is called once, from main, before any other thread starts
// (not thread-safe). A HeapTrimmer's thread stops when it is destroyed.
#ifndef CASCADE_UTIL_RUNTIME_H_
#define CASCADE_UTIL_RUNTIME_H_

#include <chrono>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cascade {

inline constexpr int kMallocArenas = 4;

void ConfigureRuntime();

class HeapTrimmer {
 public:
  explicit HeapTrimmer(std::chrono::milliseconds interval = std::chrono::seconds(30));
  ~HeapTrimmer();
  HeapTrimmer(const HeapTrimmer&) = delete;
  HeapTrimmer& operator=(const HeapTrimmer&) = delete;

 private:
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace cascade

#endif  // CASCADE_UTIL_RUNTIME_H_
