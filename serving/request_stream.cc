#include "serving/request_stream.h"

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

std::optional<StreamEvent> RequestStream::TryNext() {
  absl::MutexLock lock(&mu_);
  if (events_.empty()) return std::nullopt;
  StreamEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

void RequestStream::SetListener(std::function<void()> listener) {
  auto shared = std::make_shared<const std::function<void()>>(std::move(listener));
  bool queued;
  {
    absl::MutexLock lock(&mu_);
    listener_ = shared;
    queued = !events_.empty();
  }
  if (queued) (*shared)();
}

void RequestStream::Push(StreamEvent e) {
  std::shared_ptr<const std::function<void()>> listener;
  {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(e));
    listener = listener_;
  }
  if (listener) (*listener)();
}

}  // namespace cascade
