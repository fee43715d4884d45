// safetensors files (Hugging Face): JSON header + raw little-endian tensor data, via mmap.
//
// Contract:
// - SafetensorsFile::Open maps the file and validates the header: its length against the
//   file size and a 100 MB cap, the JSON syntax, and for each tensor the dtype, the shape
//   (non-negative, overflow-checked element count), and data_offsets (begin <= end, inside
//   the data section, size == elements x dtype size, no two tensors overlapping). Errors
//   are InvalidArgument and name the file, the tensor and the field.
// - Immutable after Open; data pointers live as long as the object. Thread-safe to read.
// - Data is not guaranteed to be aligned to its element size: read it with memcpy or
//   check alignment before reinterpreting.
#ifndef CASCADE_MODEL_SAFETENSORS_H_
#define CASCADE_MODEL_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor/tensor_type.h"
#include "util/mapped_file.h"

namespace cascade {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;               // as written: "F32", "BF16", ...
  std::optional<TensorType> type;  // set for dtypes Cascade can load as weights
  std::vector<int64_t> shape;      // outermost first (PyTorch order)
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Parse(std::span<const uint8_t> bytes,
                                                                const std::string& name);

  const std::string& path() const { return name_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  absl::Status ParseAll();

  std::string name_;
  std::unique_ptr<MappedFile> file_;
  std::span<const uint8_t> bytes_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Reads model.safetensors.index.json: the shard file names (relative to the index's
// folder), each listed once, in first-seen order, and checks that they stay inside it.
absl::StatusOr<std::vector<std::string>> ReadSafetensorsIndex(const std::string& index_path);

}  // namespace cascade

#endif  // CASCADE_MODEL_SAFETENSORS_H_
