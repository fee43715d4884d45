// Element types of model tensors, numbered as in GGUF (ggml_type), with their block layouts.
//
// Contract: every type GGUF defines is recognised (so that `cascade inspect` can describe
// any file and errors can name the type); IsComputeSupported() says which ones the
// kernels can multiply. Pure data, thread-safe.
#ifndef CASCADE_TENSOR_TENSOR_TYPE_H_
#define CASCADE_TENSOR_TENSOR_TYPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cascade {

enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct TensorTypeTraits {
  TensorType type;
  const char* name;
  uint32_t block_elems;  // elements per block (1 for plain types)
  uint32_t block_bytes;  // bytes per block
};

// Traits of a raw GGUF type number, or nullopt if the number is not a known type.
std::optional<TensorTypeTraits> LookupTensorType(uint32_t raw);
const TensorTypeTraits& Traits(TensorType type);
const char* TensorTypeName(TensorType type);
// Parses a name such as "Q4_K" or "f16" (case-insensitive).
std::optional<TensorType> ParseTensorTypeName(std::string_view name);

// True for the types the CPU kernels can use as matmul weights.
bool IsComputeSupported(TensorType type);

// True for the element types a KV cache can hold: F32 and F16 (half the bytes; keys and
// values rounded to nearest even on the way in, exact on the way out).
bool IsKvCacheType(TensorType type);
// Bytes of one KV cache element (4 for F32, 2 for F16); type must be IsKvCacheType.
inline size_t KvElementBytes(TensorType type) { return type == TensorType::kF16 ? 2 : 4; }
// A KV cache type from a user's name ("f32", "F16"; any case), or nullopt for any other.
std::optional<TensorType> ParseKvCacheType(std::string_view name);

// Bytes of a row of `elems` elements; false if elems is not a multiple of the block size
// or the size overflows.
[[nodiscard]] bool RowBytes(TensorType type, uint64_t elems, uint64_t* bytes);

}  // namespace cascade

#endif  // CASCADE_TENSOR_TENSOR_TYPE_H_
