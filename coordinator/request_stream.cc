#include "coordinator/request_stream.h"

#include "absl/time/time.h"

namespace cascade {

std::optional<StreamEvent> RequestStream::Next(std::chrono::milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(this, &RequestStream::HasEvent),
                            absl::FromChrono(timeout))) {
    return std::nullopt;
  }
  StreamEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void RequestStream::Push(StreamEvent e) {
  absl::MutexLock lock(&mu_);
  events_.push_back(std::move(e));
}

}  // namespace cascade
