#include "serving/ngram_drafter.h"

#include <algorithm>

namespace cascade {

std::vector<int32_t> DraftByLookup(std::span<const int32_t> tokens, int k,
                                   const NgramDraftOptions& options) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  if (k <= 0) return {};
  for (int n = options.max_ngram; n >= std::max(1, options.min_ngram); --n) {
    if (len <= n) continue;
    const auto tail = tokens.subspan(static_cast<size_t>(len - n));
    // Latest earlier occurrence: a start s < len - n whose n tokens equal the tail, and
    // which has at least one token after it.
    for (int64_t s = len - n - 1; s >= 0; --s) {
      if (!std::equal(tail.begin(), tail.end(), tokens.begin() + s)) continue;
      const int64_t from = s + n;
      const int64_t count = std::min<int64_t>(k, len - from);
      return {tokens.begin() + from, tokens.begin() + from + count};
    }
  }
  return {};
}

}  // namespace cascade
