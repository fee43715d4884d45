// Minimal NumPy .npy reader/writer for float32 arrays (logits dumps and test references).
//
// Contract: WriteNpyF32 writes a version-1.0 little-endian '<f4' C-order array; ReadNpyF32
// accepts versions 1.x-3.x with dtype '<f4' and C order, checks that the header's shape
// matches the payload size, and fails with a message naming the file otherwise.
#ifndef CASCADE_UTIL_NPY_H_
#define CASCADE_UTIL_NPY_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cascade {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // C order
};

absl::Status WriteNpyF32(const std::string& path, std::span<const int64_t> shape,
                         std::span<const float> data);
absl::StatusOr<NpyArray> ReadNpyF32(const std::string& path);

}  // namespace cascade

#endif  // CASCADE_UTIL_NPY_H_
