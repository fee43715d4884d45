// libFuzzer target: safetensors header and data-range validation.
#include <cstddef>
#include <cstdint>
#include <span>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = cascade::SafetensorsFile::Parse(std::span<const uint8_t>(data, size), "fuzz.st");
  if (!file.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& t : (*file)->tensors()) {
    if (t.nbytes > 0) sink = sink + t.data[0] + t.data[t.nbytes - 1];
  }
  return 0;
}
