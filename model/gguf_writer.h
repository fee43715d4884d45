// Writes GGUF v3 files: used by `cascade quantize`, `cascade make-model` and by tests that
// build small (valid or deliberately corrupt) models.
//
// Contract: keys and tensors are written in the order they were added; tensor data is
// aligned to `alignment` (32 by default). Tensor bytes come either from a span the caller
// keeps alive until Write returns, or from a producer called once during Write (so large
// models are converted one tensor at a time). Not thread-safe.
#ifndef CASCADE_MODEL_GGUF_WRITER_H_
#define CASCADE_MODEL_GGUF_WRITER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/gguf.h"

namespace cascade {

class GgufWriter {
 public:
  using Producer = std::function<absl::Status(std::vector<uint8_t>* out)>;

  void SetValue(const std::string& key, GgufValue value);
  void SetString(const std::string& key, const std::string& value);
  void SetUint32(const std::string& key, uint32_t value);
  void SetInt32(const std::string& key, int32_t value);
  void SetFloat32(const std::string& key, float value);
  void SetBool(const std::string& key, bool value);
  void SetStringArray(const std::string& key, const std::vector<std::string>& values);
  void SetFloat32Array(const std::string& key, const std::vector<float>& values);
  void SetInt32Array(const std::string& key, const std::vector<int32_t>& values);
  void set_alignment(uint32_t alignment);

  // ne[0] is the row length. `bytes` must hold exactly the tensor's size.
  void AddTensor(const std::string& name, TensorType type, std::vector<int64_t> ne,
                 std::span<const uint8_t> bytes);
  void AddTensor(const std::string& name, TensorType type, std::vector<int64_t> ne,
                 Producer producer);

  absl::Status WriteFile(const std::string& path) const;
  absl::StatusOr<std::vector<uint8_t>> Serialize() const;

 private:
  struct Tensor {
    std::string name;
    TensorType type;
    std::vector<int64_t> ne;
    std::span<const uint8_t> bytes;
    Producer producer;
    uint64_t nbytes = 0;
  };
  absl::Status Emit(const std::function<absl::Status(const void*, size_t)>& sink) const;

  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace cascade

#endif  // CASCADE_MODEL_GGUF_WRITER_H_
