// Router: which replica, a Scheduler over a pipeline of its own, serves a request.
//
// Policies (`--routing`):
// - cache-aware (the default): the replica of least cost, where
//     cost(r) = tokens r must prefill (the prompt less the leading tokens r holds cached,
//               Scheduler::CachedPrefixTokens)
//             + kQueueCostTokens x (requests running or waiting on r),
//   ties to the replica with fewer requests, then the lower index. A conversation that
//   sends its history again goes where that history is cached unless that replica is
//   busier by more than the prefill it would save (a queued or running request is counted
//   as kQueueCostTokens tokens of prefill). The scheduler's view may be stale: a wrong
//   guess costs a prefill, never a wrong answer.
// - least-loaded: the replica with the fewest requests running or waiting.
// - round-robin: each in turn.
// A replica given as null (not serving now) is skipped. Thread-safe.
#ifndef CASCADE_SERVING_ROUTER_H_
#define CASCADE_SERVING_ROUTER_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "serving/scheduler.h"

namespace cascade {

inline constexpr int64_t kQueueCostTokens = 128;

class Router {
 public:
  enum class Policy { kCacheAware, kLeastLoaded, kRoundRobin };
  static std::optional<Policy> ParsePolicy(std::string_view name);
  static const char* PolicyName(Policy p);

  explicit Router(Policy policy) : policy_(policy) {}
  Policy policy() const { return policy_; }

  // The index in `replicas` of the one to serve `prompt`; -1 when none serves.
  int Choose(std::span<const int32_t> prompt, std::span<Scheduler* const> replicas);

 private:
  const Policy policy_;
  std::atomic<uint64_t> turn_{0};
};

}  // namespace cascade

#endif  // CASCADE_SERVING_ROUTER_H_
