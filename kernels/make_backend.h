// MakeBackend: the one place that turns a device choice into a Backend, for every caller
// (the CLI, workers, benchmarks).
//
// Contract: kAuto picks the first usable GPU and otherwise the CPU, logging at info level
// which one and why (a CPU-only machine is a normal place to run, not a warning); kCuda
// fails with Unavailable naming the reason when that GPU cannot be used; kCpu never
// fails. Thread-safe.
#ifndef CASCADE_KERNELS_MAKE_BACKEND_H_
#define CASCADE_KERNELS_MAKE_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "tensor/device.h"

namespace cascade {

struct BackendOptions {
  int threads = 1;  // CPU compute threads (the caller's included)
  // Quantize activations to 8 bits for quantized weights on the CPU (fast integer dot
  // products); false computes them in F32 from dequantized weights. GPUs always use F32.
  bool quantized_activations = true;
};

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const DeviceSpec& device,
                                                     const BackendOptions& options);

}  // namespace cascade

#endif  // CASCADE_KERNELS_MAKE_BACKEND_H_
