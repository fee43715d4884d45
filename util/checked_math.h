// Overflow-checked integer arithmetic for parsing untrusted files and frames.
//
// Contract: each function returns false (and leaves *out unspecified) when the exact
// mathematical result does not fit in the destination type. Header-only, thread-safe.
#ifndef CASCADE_UTIL_CHECKED_MATH_H_
#define CASCADE_UTIL_CHECKED_MATH_H_

#include <cstdint>
#include <initializer_list>

namespace cascade {

template <typename T>
[[nodiscard]] inline bool CheckedAdd(T a, T b, T* out) {
  return !__builtin_add_overflow(a, b, out);
}

template <typename T>
[[nodiscard]] inline bool CheckedMul(T a, T b, T* out) {
  return !__builtin_mul_overflow(a, b, out);
}

// Product of all factors, or false on overflow.
[[nodiscard]] inline bool CheckedProduct(std::initializer_list<uint64_t> factors, uint64_t* out) {
  uint64_t acc = 1;
  for (uint64_t f : factors) {
    if (!CheckedMul(acc, f, &acc)) return false;
  }
  *out = acc;
  return true;
}

// True when [offset, offset + size) lies inside [0, limit).
[[nodiscard]] inline bool RangeWithin(uint64_t offset, uint64_t size, uint64_t limit) {
  uint64_t end;
  return CheckedAdd(offset, size, &end) && end <= limit;
}

// Rounds `value` up to a multiple of `alignment` (a power of two or any positive value).
[[nodiscard]] inline bool CheckedAlignUp(uint64_t value, uint64_t alignment, uint64_t* out) {
  if (alignment == 0) return false;
  uint64_t rem = value % alignment;
  if (rem == 0) {
    *out = value;
    return true;
  }
  return CheckedAdd(value, alignment - rem, out);
}

}  // namespace cascade

#endif  // CASCADE_UTIL_CHECKED_MATH_H_
