// GPU discovery and backend factory for builds with CUDA.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/gpu.h"

namespace cascade {

std::vector<GpuInfo> ListGpus(std::string* why) {
  std::vector<GpuInfo> gpus;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why != nullptr)
      *why = absl::StrCat("no usable CUDA driver or device (", cudaGetErrorString(e), ")");
    return gpus;
  }
  if (count == 0) {
    if (why != nullptr) *why = "no CUDA device present";
    return gpus;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    GpuInfo g;
    g.index = i;
    g.name = prop.name;
    g.total_bytes = prop.totalGlobalMem;
    g.compute_major = prop.major;
    g.compute_minor = prop.minor;
    g.multiprocessors = prop.multiProcessorCount;
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      g.free_bytes = free_b;
    }
    gpus.push_back(g);
  }
  return gpus;
}

bool BuiltWithCuda() { return true; }

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const CudaBackendOptions& options) {
  auto be = CudaBackend::Create(options);
  if (!be.ok()) return be.status();
  return std::unique_ptr<Backend>(std::move(*be));
}

}  // namespace cascade
