#include "serving/router.h"

#include <tuple>

namespace cascade {

std::optional<Router::Policy> Router::ParsePolicy(std::string_view name) {
  if (name == "cache-aware") return Policy::kCacheAware;
  if (name == "least-loaded") return Policy::kLeastLoaded;
  if (name == "round-robin") return Policy::kRoundRobin;
  return std::nullopt;
}

const char* Router::PolicyName(Policy p) {
  switch (p) {
    case Policy::kCacheAware:
      return "cache-aware";
    case Policy::kLeastLoaded:
      return "least-loaded";
    case Policy::kRoundRobin:
      return "round-robin";
  }
  return "?";
}

int Router::Choose(std::span<const int32_t> prompt, std::span<Scheduler* const> replicas) {
  const int n = static_cast<int>(replicas.size());
  if (policy_ == Policy::kRoundRobin) {
    const uint64_t start = turn_.fetch_add(1);
    for (int k = 0; k < n; ++k) {
      const int r = static_cast<int>((start + k) % n);
      if (replicas[r] != nullptr) return r;
    }
    return -1;
  }
  int best = -1;
  std::tuple<int64_t, int64_t, int> best_key{};
  for (int r = 0; r < n; ++r) {
    if (replicas[r] == nullptr) continue;
    const SchedulerStats st = replicas[r]->Stats();
    const int64_t requests = st.running + st.waiting;
    int64_t cost = requests;
    if (policy_ == Policy::kCacheAware) {
      const int64_t to_prefill =
          static_cast<int64_t>(prompt.size()) - replicas[r]->CachedPrefixTokens(prompt);
      cost = to_prefill + kQueueCostTokens * requests;
    }
    const std::tuple<int64_t, int64_t, int> key{cost, requests, r};
    if (best < 0 || key < best_key) {
      best = r;
      best_key = key;
    }
  }
  return best;
}

}  // namespace cascade
