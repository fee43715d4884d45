// ActivationChannel: how frames move between neighbouring pipeline stages. One link has a
// sending end (the upstream stage, or the coordinator for stage 0) and a receiving end
// (the downstream stage). Implementations: in-process (a bounded queue; here), gRPC
// bidirectional streams (grpc_link.h) and length-prefixed frames on plain TCP (tcp_link.h).
// MPI point-to-point and NCCL send/recv are the planned next transports; they implement
// the same two interfaces.
//
// Contract:
// - Frames arrive in the order they were sent; a link never reorders or duplicates.
// - Send blocks while the link's buffer is full (backpressure) and fails with Unavailable
//   when the link is closed or broken; a failed Send delivered nothing.
// - Receive blocks for the next frame and returns nullopt once the link is closed and
//   drained. Frames from a network peer are validated (DecodeFrame) before they are
//   returned; invalid frames are rejected with a logged reason and never returned.
// - Each end is used by one thread (Send and Close may be called from any thread).
#ifndef CASCADE_WORKER_ACTIVATION_CHANNEL_H_
#define CASCADE_WORKER_ACTIVATION_CHANNEL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "worker/frame.h"

namespace cascade {

class ActivationSender {
 public:
  virtual ~ActivationSender() = default;
  virtual absl::Status Send(StageFrame frame) = 0;
  virtual void Close() = 0;
  // From now on a Send that would have to (re)connect fails at once, and one waiting to
  // connect gives up; a link that is up keeps working until Close. Lets a stopping stage
  // drain its queue to a live neighbour without waiting on a dead one.
  virtual void StopReconnecting() {}
};

class ActivationReceiver {
 public:
  virtual ~ActivationReceiver() = default;
  virtual std::optional<StageFrame> Receive() = 0;
  virtual void Close() = 0;
};

// Where the last stage reports sampled tokens (the coordinator). StopReconnecting and
// Close as for ActivationSender: after Close every Send fails at once.
class ResultSender {
 public:
  virtual ~ResultSender() = default;
  virtual absl::Status Send(StepResult result) = 0;
  virtual void Close() {}
  virtual void StopReconnecting() {}
};

// A bounded FIFO shared by an in-process sender and receiver.
template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {}

  // False once closed.
  bool Push(T item) {
    std::unique_lock<std::mutex> lock(mu_);
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }
  // nullopt once closed and empty.
  std::optional<T> Pop() {
    std::unique_lock<std::mutex> lock(mu_);
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return items_.size();
  }

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<T> items_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// Both ends of an in-process link (stages as threads of one process, tests).
struct InProcessLink {
  std::unique_ptr<ActivationSender> sender;
  std::unique_ptr<ActivationReceiver> receiver;
};
InProcessLink MakeInProcessLink(size_t capacity = 8);

// A ResultSender that calls a function (in-process coordinator, tests).
class CallbackResultSender : public ResultSender {
 public:
  explicit CallbackResultSender(std::function<absl::Status(StepResult)> fn) : fn_(std::move(fn)) {}
  absl::Status Send(StepResult result) override { return fn_(std::move(result)); }

 private:
  std::function<absl::Status(StepResult)> fn_;
};

}  // namespace cascade

#endif  // CASCADE_WORKER_ACTIVATION_CHANNEL_H_
