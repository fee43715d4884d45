// RequestStream: the events of one generation request, from the scheduler thread to the
// API handler that streams them to the client.
//
// Contract: the scheduler Push()es events, the last one with `last` set, exactly once; the
// handler calls Next() until it gets that event (or nullopt on timeout). Cancel() may be
// called from any thread at any time; the scheduler then frees the sequence within one
// step. A listener set with SetListener() is called after every Push() (on the pushing
// thread, outside the stream's lock; it must be quick and must not call Push()), so an
// event-driven handler (the HTTP server) need not poll. Thread-safe.
#ifndef CASCADE_SERVING_REQUEST_STREAM_H_
#define CASCADE_SERVING_REQUEST_STREAM_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "serving/sequence.h"

namespace cascade {

struct StreamUsage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
  uint64_t seed = 0;
  double time_to_first_token_s = 0;
  double total_time_s = 0;
  double queue_time_s = 0;  // from submission to admission
};

struct StreamEvent {
  std::string text;             // newly visible text (complete UTF-8)
  std::vector<int32_t> ids;     // ids that produced it
  std::vector<float> logprobs;  // per id, when asked for
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // per id, when asked for
  bool last = false;
  FinishReason finish = FinishReason::kLength;
  absl::Status status;  // non-OK: the request failed (last is set)
  StreamUsage usage;    // on the last event
};

class RequestStream {
 public:
  // Waits up to `timeout` for the next event.
  std::optional<StreamEvent> Next(std::chrono::milliseconds timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // The next event if one is queued; never waits.
  std::optional<StreamEvent> TryNext() ABSL_LOCKS_EXCLUDED(mu_);
  // Calls `listener` after each later Push(), and once now if events are already queued.
  void SetListener(std::function<void()> listener) ABSL_LOCKS_EXCLUDED(mu_);
  void Cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  void Push(StreamEvent e) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  bool HasEvent() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !events_.empty(); }
  absl::Mutex mu_;
  std::deque<StreamEvent> events_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const std::function<void()>> listener_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> cancelled_{false};
};

}  // namespace cascade

#endif  // CASCADE_SERVING_REQUEST_STREAM_H_
