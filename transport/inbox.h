// The receiving end of the data plane, the same for every transport: a stage's FrameInbox
// (validates each incoming frame against what the stage expects, then queues it for the
// stage executor) and the FrameRouter that points the process's receivers at the inbox of
// the stage loaded now. Transports only parse bytes into messages and hand them here.
//
// Contract:
// - FrameInbox::Accept validates with DecodeFrame before queueing. A frame without the
//   inbound link's key is refused with PermissionDenied and nothing else happens (the
//   transport closes the connection it came on). A frame with the key that fails another
//   check is counted, logged by the router, answered with a FrameAck carrying the reason,
//   and turned into an error frame for its batch, so that the rest of the pipeline and the
//   coordinator learn the batch is lost; nothing of it reaches the stage.
// - FrameRouter::Deliver with no stage loaded refuses the frame the same way (no error
//   frame: there is no pipeline to tell).
// - Thread-safe. Accept blocks while the inbox is full (backpressure on the sender's
//   connection) and fails once it is closed.
#ifndef CASCADE_TRANSPORT_INBOX_H_
#define CASCADE_TRANSPORT_INBOX_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/data_plane.pb.h"
#include "transport/frame.h"
#include "transport/link.h"
#include "util/bounded_queue.h"

namespace cascade {

class FrameInbox {
 public:
  explicit FrameInbox(FrameExpectations expect, size_t capacity = 8)
      : expect_(expect), queue_(capacity) {}
  const FrameExpectations& expectations() const { return expect_; }
  // Validates and queues a wire frame. Returns the rejection reason, or OK.
  absl::Status Accept(const v1::ActivationFrame& wire);
  // An ActivationReceiver reading this inbox (for the stage executor). The inbox must
  // outlive it.
  std::unique_ptr<ActivationReceiver> MakeReceiver();
  void Close() { queue_.Close(); }
  uint64_t rejected() const { return rejected_.load(); }

 private:
  const FrameExpectations expect_;
  BoundedQueue<StageFrame> queue_;
  std::atomic<uint64_t> rejected_{0};
};

class FrameRouter {
 public:
  void SetInbox(std::shared_ptr<FrameInbox> inbox) ABSL_LOCKS_EXCLUDED(mu_);
  // Validates and queues one parsed frame from `peer` (named in logs). nullopt: accepted;
  // else the FrameAck to answer with, or, for a frame without the link's key, an error
  // (the transport drops the connection).
  absl::StatusOr<std::optional<v1::FrameAck>> Deliver(const v1::ActivationFrame& frame,
                                                      const std::string& peer)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Frames refused here since start (by any inbox, or for want of one).
  uint64_t rejected() const { return rejected_.load(); }

 private:
  absl::Mutex mu_;
  std::shared_ptr<FrameInbox> inbox_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> rejected_{0};
};

// Where step results arriving at the coordinator go (any transport); `peer` names the
// sender in logs. An error (a result without the link's key) drops the connection.
using ResultHandler =
    std::function<absl::Status(const v1::StepResult& result, const std::string& peer)>;

// What one process receives on its data plane: frames for its stage (workers), results
// (the coordinator), or both. Null / empty members refuse that kind.
struct DataPlaneHandlers {
  FrameRouter* frames = nullptr;
  ResultHandler results;
};

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_INBOX_H_
