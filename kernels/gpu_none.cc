// GPU entry points for builds without CUDA.
#include "kernels/gpu.h"

namespace cascade {

std::vector<GpuInfo> ListGpus(std::string* why) {
  if (why != nullptr) *why = "this build of Cascade has no CUDA support (built without nvcc)";
  return {};
}

bool BuiltWithCuda() { return false; }

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions&) {
  return absl::UnavailableError("this build of Cascade has no CUDA support");
}

}  // namespace cascade
