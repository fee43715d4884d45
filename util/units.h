// Byte sizes for people: "1.25 GiB" out, "8GiB" / "512MB" in.
//
// Contract: pure functions, thread-safe. ParseBytes accepts a non-negative decimal number
// with an optional unit (B, K/KiB, M/MiB, G/GiB, T/TiB binary; KB, MB, GB, TB decimal).
#ifndef CASCADE_UTIL_UNITS_H_
#define CASCADE_UTIL_UNITS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace cascade {

std::string HumanBytes(uint64_t bytes);
absl::StatusOr<uint64_t> ParseBytes(const std::string& text);

}  // namespace cascade

#endif  // CASCADE_UTIL_UNITS_H_
