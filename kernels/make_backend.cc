#include "kernels/make_backend.h"

#include "kernels/cpu/cpu_backend.h"
#include "kernels/gpu.h"
#include "util/logging.h"

namespace cascade {

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const DeviceSpec& device,
                                                     const BackendOptions& options) {
  auto cpu = [&]() -> std::unique_ptr<Backend> {
    CpuBackendOptions bo;
    bo.threads = options.threads;
    bo.quantized_activations = options.quantized_activations;
    return std::make_unique<CpuBackend>(bo);
  };
  switch (device.kind) {
    case DeviceKind::kCpu:
      return cpu();
    case DeviceKind::kAuto: {
      std::string why;
      if (ListGpus(&why).empty()) {
        if (BuiltWithCuda()) spdlog::info("no usable GPU ({}); computing on the CPU", why);
        return cpu();
      }
      return CreateCudaBackend({});
    }
    case DeviceKind::kCuda: {
      CudaBackendOptions co;
      co.device = device.index;
      return CreateCudaBackend(co);
    }
  }
  return cpu();
}

}  // namespace cascade
