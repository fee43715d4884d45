// GpuMonitor: utilisation, memory and temperature of this machine's NVIDIA GPUs, read
// through NVML (libnvidia-ml.so.1, which comes with the driver), for the heartbeat and so
// for the coordinator's /metrics.
//
// NVML is opened at run time (dlopen), so the worker neither links it nor needs it: on a
// machine without the driver (every CPU node) Sample() returns nothing, and says why once
// at debug level. Contract: thread-safe; Sample() costs a few NVML calls per GPU.
#ifndef CASCADE_WORKER_GPU_MONITOR_H_
#define CASCADE_WORKER_GPU_MONITOR_H_

#include <memory>
#include <string>
#include <vector>

#include "cascade/v1/control_plane.pb.h"

namespace cascade {

class GpuMonitor {
 public:
  GpuMonitor();
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  bool available() const;
  // Why NVML is not available ("" when it is).
  const std::string& unavailable_reason() const;
  // One entry per GPU; empty without NVML.
  std::vector<v1::GpuStats> Sample() const;

  class Nvml;

 private:
  std::unique_ptr<Nvml> nvml_;
};

}  // namespace cascade

#endif  // CASCADE_WORKER_GPU_MONITOR_H_
