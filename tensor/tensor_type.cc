#include "tensor/tensor_type.h"

#include <array>
#include <cctype>

#include "util/checked_math.h"

namespace cascade {
namespace {

using T = TensorType;
constexpr std::array<TensorTypeTraits, 32> kTypes = {{
    {T::kF32, "F32", 1, 4},
    {T::kF16, "F16", 1, 2},
    {T::kQ4_0, "Q4_0", 32, 18},
    {T::kQ4_1, "Q4_1", 32, 20},
    {T::kQ5_0, "Q5_0", 32, 22},
    {T::kQ5_1, "Q5_1", 32, 24},
    {T::kQ8_0, "Q8_0", 32, 34},
    {T::kQ8_1, "Q8_1", 32, 36},
    {T::kQ2_K, "Q2_K", 256, 84},
    {T::kQ3_K, "Q3_K", 256, 110},
    {T::kQ4_K, "Q4_K", 256, 144},
    {T::kQ5_K, "Q5_K", 256, 176},
    {T::kQ6_K, "Q6_K", 256, 210},
    {T::kQ8_K, "Q8_K", 256, 292},
    {T::kIQ2_XXS, "IQ2_XXS", 256, 66},
    {T::kIQ2_XS, "IQ2_XS", 256, 74},
    {T::kIQ3_XXS, "IQ3_XXS", 256, 98},
    {T::kIQ1_S, "IQ1_S", 256, 50},
    {T::kIQ4_NL, "IQ4_NL", 32, 18},
    {T::kIQ3_S, "IQ3_S", 256, 110},
    {T::kIQ2_S, "IQ2_S", 256, 82},
    {T::kIQ4_XS, "IQ4_XS", 256, 136},
    {T::kI8, "I8", 1, 1},
    {T::kI16, "I16", 1, 2},
    {T::kI32, "I32", 1, 4},
    {T::kI64, "I64", 1, 8},
    {T::kF64, "F64", 1, 8},
    {T::kIQ1_M, "IQ1_M", 256, 56},
    {T::kBF16, "BF16", 1, 2},
    {T::kTQ1_0, "TQ1_0", 256, 54},
    {T::kTQ2_0, "TQ2_0", 256, 66},
    {T::kMXFP4, "MXFP4", 32, 17},
}};

}  // namespace

std::optional<TensorTypeTraits> LookupTensorType(uint32_t raw) {
  for (const auto& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == raw) return t;
  }
  return std::nullopt;
}

const TensorTypeTraits& Traits(TensorType type) {
  for (const auto& t : kTypes) {
    if (t.type == type) return t;
  }
  return kTypes[0];  // unreachable for valid enumerators
}

const char* TensorTypeName(TensorType type) { return Traits(type).name; }

std::optional<TensorType> ParseTensorTypeName(std::string_view name) {
  for (const auto& t : kTypes) {
    std::string_view n = t.name;
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < n.size() && eq; ++i) {
      eq = std::toupper(static_cast<unsigned char>(name[i])) == n[i];
    }
    if (eq) return t.type;
  }
  return std::nullopt;
}

bool IsKvCacheType(TensorType type) { return type == T::kF32 || type == T::kF16; }

std::optional<TensorType> ParseKvCacheType(std::string_view name) {
  const std::optional<TensorType> type = ParseTensorTypeName(name);
  if (!type || !IsKvCacheType(*type)) return std::nullopt;
  return type;
}

bool IsComputeSupported(TensorType type) {
  switch (type) {
    case T::kF32:
    case T::kF16:
    case T::kBF16:
    case T::kQ8_0:
    case T::kQ4_0:
    case T::kQ4_1:
    case T::kQ5_0:
    case T::kQ5_1:
    case T::kQ2_K:
    case T::kQ3_K:
    case T::kQ4_K:
    case T::kQ5_K:
    case T::kQ6_K:
    case T::kIQ4_NL:
    case T::kIQ4_XS:
      return true;
    default:
      return false;
  }
}

bool RowBytes(TensorType type, uint64_t elems, uint64_t* bytes) {
  const auto& t = Traits(type);
  if (elems % t.block_elems != 0) return false;
  return CheckedMul<uint64_t>(elems / t.block_elems, t.block_bytes, bytes);
}

}  // namespace cascade
