// DeviceSpec: which device a stage computes on, as users write it ("auto", "cpu", "cuda",
// "cuda:N") and as the cluster passes it around. Parsed once, here; the backend for a
// spec is made by kernels/make_backend.h.
//
// Contract: ParseDevice accepts exactly the forms above (case-sensitive) and names the
// bad value otherwise; DeviceName(ParseDevice(s)) == s for every accepted s but "cuda",
// which is written "cuda:0". Pure, thread-safe.
#ifndef CASCADE_TENSOR_DEVICE_H_
#define CASCADE_TENSOR_DEVICE_H_

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace cascade {

enum class DeviceKind {
  kAuto,  // a GPU when one is usable, else the CPU
  kCpu,
  kCuda,
};

struct DeviceSpec {
  DeviceKind kind = DeviceKind::kAuto;
  int index = 0;  // CUDA device ordinal (kCuda only)

  bool operator==(const DeviceSpec&) const = default;
};

absl::StatusOr<DeviceSpec> ParseDevice(absl::string_view text);
std::string DeviceName(const DeviceSpec& device);

}  // namespace cascade

#endif  // CASCADE_TENSOR_DEVICE_H_
