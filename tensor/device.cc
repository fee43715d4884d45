#include "tensor/device.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cascade {

absl::StatusOr<DeviceSpec> ParseDevice(absl::string_view text) {
  if (text == "auto") return DeviceSpec{DeviceKind::kAuto, 0};
  if (text == "cpu") return DeviceSpec{DeviceKind::kCpu, 0};
  if (text == "cuda") return DeviceSpec{DeviceKind::kCuda, 0};
  if (text.substr(0, 5) == "cuda:") {
    int index = -1;
    if (absl::SimpleAtoi(text.substr(5), &index) && index >= 0 && index < 1024) {
      return DeviceSpec{DeviceKind::kCuda, index};
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device '", text, "' is not one of auto, cpu, cuda, cuda:N"));
}

std::string DeviceName(const DeviceSpec& device) {
  switch (device.kind) {
    case DeviceKind::kAuto:
      return "auto";
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return absl::StrCat("cuda:", device.index);
  }
  return "auto";
}

}  // namespace cascade
