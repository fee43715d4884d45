#include "serving/serving_metrics.h"

#include <algorithm>

namespace cascade {

const char* RequestOutcomeName(RequestOutcome o) {
  switch (o) {
    case RequestOutcome::kCompleted:
      return "completed";
    case RequestOutcome::kFailed:
      return "failed";
    case RequestOutcome::kCancelled:
      return "cancelled";
    case RequestOutcome::kRejected:
      return "rejected";
  }
  return "?";
}

double KvUsageRatio(int64_t reserved_blocks, int64_t total_blocks) {
  if (total_blocks <= 0) return 0;
  return std::clamp(static_cast<double>(reserved_blocks) / static_cast<double>(total_blocks),
                    0.0, 1.0);
}

ServingMetrics::ServingMetrics() : start_(Clock::now()) {
  s_.time_to_first_token = Histogram(LatencyBounds());
  s_.inter_token = Histogram(LatencyBounds());
  s_.end_to_end = Histogram(LatencyBounds());
  s_.queue = Histogram(LatencyBounds());
  s_.result_hop = Histogram(LatencyBounds());
}

// Moves the ring to the current second, zeroing the seconds that passed.
void ServingMetrics::Advance(Clock::time_point now) const {
  const int64_t sec = std::chrono::duration_cast<std::chrono::seconds>(now - start_).count();
  const int64_t steps = std::min<int64_t>(sec - current_second_, kWindowSeconds);
  for (int64_t i = 1; i <= steps; ++i) per_second_[(current_second_ + i) % kWindowSeconds] = 0;
  current_second_ = std::max(current_second_, sec);
}

void ServingMetrics::RecordAdmitted(double queue_s) {
  absl::MutexLock lock(&mu_);
  s_.queue.Observe(queue_s);
}

void ServingMetrics::RecordStep(const Step& step) {
  absl::MutexLock lock(&mu_);
  for (double s : step.first_token_s) s_.time_to_first_token.Observe(s);
  for (double s : step.inter_token_s) s_.inter_token.Observe(s);
  Advance(Clock::now());
  per_second_[current_second_ % kWindowSeconds] += step.generated;
}

void ServingMetrics::RecordEnded(RequestOutcome outcome, double e2e_s) {
  absl::MutexLock lock(&mu_);
  ++s_.requests[static_cast<int>(outcome)];
  if (e2e_s >= 0) s_.end_to_end.Observe(e2e_s);
}

void ServingMetrics::RecordResultHop(double seconds) {
  absl::MutexLock lock(&mu_);
  s_.result_hop.Observe(seconds);
}

std::array<uint64_t, kRequestOutcomes> ServingMetrics::Requests() const {
  absl::MutexLock lock(&mu_);
  return s_.requests;
}

ServingMetrics::Snapshot ServingMetrics::Take() const {
  absl::MutexLock lock(&mu_);
  const Clock::time_point now = Clock::now();
  Advance(now);
  Snapshot out = s_;
  // The whole seconds of the window that have passed (the current one is partial).
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double window = std::min<double>(elapsed, kWindowSeconds);
  uint64_t tokens = 0;
  for (uint64_t t : per_second_) tokens += t;
  out.recent_tokens_per_s = window > 0 ? static_cast<double>(tokens) / window : 0;
  return out;
}

}  // namespace cascade
