// Logging setup. Cascade logs through spdlog (Debian's libspdlog): human-readable lines on
// stderr, so that stdout carries only program output (generated text, ids, tables).
//
// Contract: InitLogging may be called once at program start, from main; afterwards the
// spdlog free functions (spdlog::info, ...) are thread-safe.
#ifndef CASCADE_UTIL_LOGGING_H_
#define CASCADE_UTIL_LOGGING_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

// Lets spdlog/fmt print absl::string_view (Debian's Abseil does not alias std::string_view),
// e.g. spdlog::warn("{}", status.message()).
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  auto format(absl::string_view s, fmt::format_context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

namespace cascade {

// level: trace, debug, info, warn, error, critical or off. `name` prefixes every line.
absl::Status InitLogging(std::string_view level, std::string_view name = "cascade");

}  // namespace cascade

#endif  // CASCADE_UTIL_LOGGING_H_
