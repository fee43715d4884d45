#include "util/units.h"

#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cascade {

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

absl::StatusOr<uint64_t> ParseBytes(const std::string& text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  static const std::pair<const char*, uint64_t> kUnits[] = {{"TiB", uint64_t{1} << 40},
                                                            {"GiB", uint64_t{1} << 30},
                                                            {"MiB", uint64_t{1} << 20},
                                                            {"KiB", uint64_t{1} << 10},
                                                            {"TB", 1000000000000ull},
                                                            {"GB", 1000000000ull},
                                                            {"MB", 1000000ull},
                                                            {"KB", 1000ull},
                                                            {"T", uint64_t{1} << 40},
                                                            {"G", uint64_t{1} << 30},
                                                            {"M", uint64_t{1} << 20},
                                                            {"K", uint64_t{1} << 10},
                                                            {"B", 1}};
  uint64_t mult = 1;
  for (const auto& [unit, m] : kUnits) {
    if (absl::EndsWith(s, unit)) {
      s.remove_suffix(std::strlen(unit));
      mult = m;
      break;
    }
  }
  double v;
  if (!absl::SimpleAtod(s, &v) || v < 0 || v * static_cast<double>(mult) > 1e18) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a size like 8GiB"));
  }
  return static_cast<uint64_t>(v * static_cast<double>(mult));
}

}  // namespace cascade
