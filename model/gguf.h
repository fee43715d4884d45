// GGUF model files (versions 2 and 3): metadata, tensor directory and mmap'ed tensor data.
//
// Contract:
// - GgufFile::Open maps the file read-only and parses the header, every metadata value
//   and every tensor info. Every count, length, offset and size is checked with
//   overflow-safe arithmetic against the file size and fixed caps before use; a bad file
//   yields InvalidArgument (or Unimplemented for an unsupported version) whose message
//   names the file, the field and the problem. Parsing never aborts and never reads out of
//   bounds (fuzzed in tests/fuzz).
// - After a successful Open the object is immutable: any thread may read it. Tensor data
//   pointers stay valid as long as the GgufFile lives.
// - Parse() does the same on an in-memory buffer that the caller keeps alive.
#ifndef CASCADE_MODEL_GGUF_H_
#define CASCADE_MODEL_GGUF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tensor/tensor_type.h"
#include "util/mapped_file.h"

namespace cascade {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* GgufTypeName(GgufType t);

// An array value. Numeric and bool elements are kept packed little-endian in `raw`;
// strings in `strings`; nested arrays in `arrays`.
struct GgufArray {
  GgufType elem_type = GgufType::kUint8;
  uint64_t size = 0;
  std::vector<uint8_t> raw;
  std::vector<std::string> strings;
  std::vector<GgufArray> arrays;

  bool is_integer() const;
  bool is_float() const;
  int64_t GetInt(uint64_t i) const;   // integer or bool element
  double GetFloat(uint64_t i) const;  // float or integer element
};

struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t u = 0;  // unsigned integers and bool
  int64_t i = 0;   // signed integers
  double f = 0;    // floats
  std::string str;
  GgufArray array;

  std::string DebugString(size_t max_elems = 8) const;
};

struct GgufTensorInfo {
  std::string name;
  TensorType type = TensorType::kF32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous (row) dimension
  uint64_t offset = 0;           // from the start of the data section
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;

  uint64_t elements() const { return static_cast<uint64_t>(ne[0] * ne[1] * ne[2] * ne[3]); }
};

class GgufFile {
 public:
  // Caps on untrusted values (well above any real model).
  static constexpr uint64_t kMaxStringBytes = uint64_t{1} << 28;
  static constexpr uint64_t kMaxArrayElems = uint64_t{1} << 26;
  static constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
  static constexpr uint64_t kMaxKeys = uint64_t{1} << 20;
  static constexpr int kMaxArrayDepth = 4;

  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses a buffer that outlives the returned object. `name` is used in error messages.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(std::span<const uint8_t> bytes,
                                                         const std::string& name);

  const std::string& path() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return bytes_.size(); }

  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;

  // Typed getters: NotFound when absent, InvalidArgument (naming file, key, type) when the
  // value has another type or does not fit.
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<const GgufArray*> GetArray(std::string_view key) const;
  // As above, but absent keys give `fallback`; a present key of the wrong type is an error.
  absl::StatusOr<int64_t> GetIntOr(std::string_view key, int64_t fallback) const;
  absl::StatusOr<double> GetFloatOr(std::string_view key, double fallback) const;
  absl::StatusOr<bool> GetBoolOr(std::string_view key, bool fallback) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;

  // Hints the kernel to read all tensor data ahead (no-op for Parse()d buffers).
  void Prefetch() const;

 private:
  GgufFile() = default;
  absl::Status ParseAll();

  std::string name_;
  std::unique_ptr<MappedFile> file_;  // null when parsed from a caller's buffer
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace cascade

#endif  // CASCADE_MODEL_GGUF_H_
