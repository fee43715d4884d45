// ServingMetrics: what the scheduler measures about the requests it serves, for /metrics:
// requests by outcome, prompt and generated tokens, and the latency histograms (time to
// first token, inter-token latency, end-to-end latency, queue time), plus the recent
// generation rate (tokens per second over the last minute) the cost figures use.
//
// Contract: thread-safe; every Record* is O(1) (a lock and a few adds). Snapshot() copies.
#ifndef CASCADE_SERVING_SERVING_METRICS_H_
#define CASCADE_SERVING_SERVING_METRICS_H_

#include <array>
#include <chrono>
#include <vector>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "util/histogram.h"

namespace cascade {

// How a request ended.
enum class RequestOutcome { kCompleted, kFailed, kCancelled, kRejected };
inline constexpr int kRequestOutcomes = 4;
const char* RequestOutcomeName(RequestOutcome o);  // "completed", ...

// The KV cache's use: reserved blocks over the pipeline's blocks, 0..1 (0 without a
// pipeline). The one definition /metrics, `cascade status` and the throughput log use.
double KvUsageRatio(int64_t reserved_blocks, int64_t total_blocks);

class ServingMetrics {
 public:
  using Clock = std::chrono::steady_clock;

  struct Snapshot {
    std::array<uint64_t, kRequestOutcomes> requests{};  // by RequestOutcome
    Histogram time_to_first_token, inter_token, end_to_end, queue;
    Histogram result_hop;  // last stage -> coordinator, by the sender's clock
    double recent_tokens_per_s = 0;  // generated, over the last minute (or since start)
    // Adds another's counts (another replica's scheduler): the sums of both.
    void Add(const Snapshot& o) {
      for (size_t i = 0; i < requests.size(); ++i) requests[i] += o.requests[i];
      time_to_first_token.Merge(o.time_to_first_token);
      inter_token.Merge(o.inter_token);
      end_to_end.Merge(o.end_to_end);
      queue.Merge(o.queue);
      result_hop.Merge(o.result_hop);
      recent_tokens_per_s += o.recent_tokens_per_s;
    }
  };

  ServingMetrics();

  void RecordAdmitted(double queue_s) ABSL_LOCKS_EXCLUDED(mu_);
  // One result's tokens, under one lock: the times to first token and between tokens of
  // the sequences that got one, and how many tokens were generated. (Token counts
  // themselves are the scheduler's SchedulerStats.)
  struct Step {
    std::vector<double> first_token_s, inter_token_s;
    uint64_t generated = 0;
  };
  void RecordStep(const Step& step) ABSL_LOCKS_EXCLUDED(mu_);
  // A request ended; e2e_s < 0 when it never ran (rejected, or ended while waiting).
  void RecordEnded(RequestOutcome outcome, double e2e_s) ABSL_LOCKS_EXCLUDED(mu_);
  void RecordResultHop(double seconds) ABSL_LOCKS_EXCLUDED(mu_);

  Snapshot Take() const ABSL_LOCKS_EXCLUDED(mu_);
  // Just the requests by outcome (Take's `requests`, without copying the histograms).
  std::array<uint64_t, kRequestOutcomes> Requests() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr int kWindowSeconds = 60;
  void Advance(Clock::time_point now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  Snapshot s_ ABSL_GUARDED_BY(mu_);
  const Clock::time_point start_;
  // Generated tokens per second of the last minute, a ring indexed by second.
  mutable std::array<uint64_t, kWindowSeconds> per_second_ ABSL_GUARDED_BY(mu_){};
  mutable int64_t current_second_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cascade

#endif  // CASCADE_SERVING_SERVING_METRICS_H_
