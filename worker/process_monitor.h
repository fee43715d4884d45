// ProcessMonitor: this process's CPU time, CPU utilisation and resident memory, for the
// heartbeat (v1::ProcessStats) and so for the coordinator's /metrics and `cascade status`:
// what GpuMonitor (worker/gpu_monitor.h) reports for GPUs, for every worker, CPU workers
// above all.
//
// Contract: thread-safe. Sample() reads getrusage and /proc/self/statm (a few
// microseconds); utilisation is the CPU time since the previous Sample() over the wall
// time since then times the machine's cores (0..1; 0 at the first sample). Where
// /proc is missing the resident memory reads 0.
#ifndef CASCADE_WORKER_PROCESS_MONITOR_H_
#define CASCADE_WORKER_PROCESS_MONITOR_H_

#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/control_plane.pb.h"

namespace cascade {

class ProcessMonitor {
 public:
  ProcessMonitor();
  v1::ProcessStats Sample() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  absl::Mutex mu_;
  Clock::time_point last_wall_ ABSL_GUARDED_BY(mu_);
  double last_cpu_s_ ABSL_GUARDED_BY(mu_) = 0;
};

// This process's user + system CPU seconds and resident bytes, as Sample() reads them.
double ProcessCpuSeconds();
uint64_t ProcessResidentBytes();

}  // namespace cascade

#endif  // CASCADE_WORKER_PROCESS_MONITOR_H_
