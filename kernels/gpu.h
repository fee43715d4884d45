// GPUs: discovery and the CUDA backend factory. Always compiled; in builds without CUDA
// (or on machines without a GPU) ListGpus() returns no devices and says why, and
// CreateCudaBackend() returns Unavailable, so callers carry on with the CPU.
//
// Contract: thread-safe; ListGpus never aborts, whatever the driver state.
#ifndef CASCADE_KERNELS_GPU_H_
#define CASCADE_KERNELS_GPU_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace cascade {

struct GpuInfo {
  int index = 0;
  std::string name;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
};

// The CUDA devices this process can use; empty with *why set when there are none.
std::vector<GpuInfo> ListGpus(std::string* why);

// True when this binary was built with the CUDA kernels.
bool BuiltWithCuda();

struct CudaBackendOptions {
  int device = 0;
  bool quantized_activations = false;  // the CUDA kernels always compute in F32
};

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options);

}  // namespace cascade

#endif  // CASCADE_KERNELS_GPU_H_
