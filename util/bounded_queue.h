// BoundedQueue: a FIFO of at most `capacity` items shared by producer and consumer
// threads, with blocking Push (backpressure) and Pop, and Close for shutdown.
//
// Contract: thread-safe. Push blocks while the queue is full and returns false once it is
// closed (the item is dropped); Pop blocks while it is empty and open, and returns
// nullopt once it is closed and drained. Close wakes every waiter.
#ifndef CASCADE_UTIL_BOUNDED_QUEUE_H_
#define CASCADE_UTIL_BOUNDED_QUEUE_H_

#include <chrono>
#include <deque>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace cascade {

template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {}

  bool Push(T item) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &BoundedQueue::HasRoomOrClosed));
    if (closed_) return false;
    items_.push_back(std::move(item));
    return true;
  }
  std::optional<T> Pop() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &BoundedQueue::HasItemOrClosed));
    return PopLocked();
  }
  // As Pop, waiting at most `timeout`; nullopt on timeout too (check closed()).
  std::optional<T> PopFor(std::chrono::milliseconds timeout) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(this, &BoundedQueue::HasItemOrClosed),
                         absl::FromChrono(timeout));
    return PopLocked();
  }
  void Close() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  bool closed() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return closed_;
  }
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return items_.size();
  }

 private:
  bool HasRoomOrClosed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || items_.size() < capacity_;
  }
  bool HasItemOrClosed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || !items_.empty();
  }
  std::optional<T> PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    return item;
  }

  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<T> items_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cascade

#endif  // CASCADE_UTIL_BOUNDED_QUEUE_H_
