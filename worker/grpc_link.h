// Activation links over gRPC: StagePipe.Forward bidirectional streams between neighbouring
// stages (frames one way, rejection notices the other), and the last stage's
// Coordinator.Results stream.
//
// Contract:
// - GrpcActivationSender / GrpcResultSender connect lazily and reconnect when the stream
//   breaks: a Send on a broken link first tries one reconnection (waiting up to
//   `connect_timeout`) and fails with Unavailable naming the peer if that fails. They are
//   safe to call from several threads (Send is serialized). Close() ends the stream
//   cleanly; a Send waiting to connect gives up within 100 ms of it or of
//   StopReconnecting(), and later Sends fail with Unavailable (after StopReconnecting,
//   only those that would have to connect).
// - FrameInbox is the receiving end: the StagePipe service decodes and validates each
//   frame against the inbox's expectations (DecodeFrame) before queueing it. A frame that
//   fails validation is answered with a FrameAck carrying the reason, logged, and turned
//   into an error frame for its batch, so the rest of the pipeline and the coordinator
//   learn of it; undecodable bytes close the stream (gRPC) with a logged reason.
#ifndef CASCADE_WORKER_GRPC_LINK_H_
#define CASCADE_WORKER_GRPC_LINK_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "cascade/v1/worker.grpc.pb.h"
#include "worker/activation_channel.h"

namespace cascade {

class GrpcActivationSender : public ActivationSender {
 public:
  explicit GrpcActivationSender(
      std::string address, std::chrono::milliseconds connect_timeout = std::chrono::seconds(10));
  ~GrpcActivationSender() override;
  absl::Status Send(StageFrame frame) override;
  void Close() override;
  void StopReconnecting() override { closing_.store(true); }
  uint64_t rejected() const { return rejected_.load(); }

 private:
  absl::Status Connect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Disconnect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string address_;
  const std::chrono::milliseconds connect_timeout_;
  std::mutex mu_;
  std::shared_ptr<grpc::Channel> channel_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<v1::StagePipe::Stub> stub_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::ClientContext> ctx_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::ClientReaderWriter<v1::ActivationFrame, v1::FrameAck>> stream_
      ABSL_GUARDED_BY(mu_);
  std::thread ack_reader_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<std::atomic<bool>> broken_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Set by Close() (before it takes mu_) or StopReconnecting(), so that a Send waiting to
  // (re)connect gives up within a poll interval instead of the whole connect timeout.
  std::atomic<bool> closing_{false};
  v1::ActivationFrame wire_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> rejected_{0};
};

class GrpcResultSender : public ResultSender {
 public:
  explicit GrpcResultSender(std::string address,
                            std::chrono::milliseconds connect_timeout = std::chrono::seconds(10));
  ~GrpcResultSender() override;
  absl::Status Send(StepResult result) override;
  void Close() override;
  void StopReconnecting() override { closing_.store(true); }

 private:
  absl::Status Connect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Disconnect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string address_;
  const std::chrono::milliseconds connect_timeout_;
  // As in GrpcActivationSender: set by Close() (before it takes mu_) or StopReconnecting().
  std::atomic<bool> closing_{false};
  std::mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<grpc::Channel> channel_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<v1::Coordinator::Stub> stub_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::ClientContext> ctx_ ABSL_GUARDED_BY(mu_);
  v1::ResultsAck ack_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::ClientWriter<v1::StepResult>> stream_ ABSL_GUARDED_BY(mu_);
  v1::StepResult wire_ ABSL_GUARDED_BY(mu_);
};

// The receiving end of a stage's inbound link(s).
class FrameInbox {
 public:
  FrameInbox(FrameExpectations expect, size_t capacity = 8) : expect_(expect), queue_(capacity) {}
  const FrameExpectations& expectations() const { return expect_; }
  // Validates and queues a wire frame (blocks when the queue is full). Returns the
  // rejection reason, or OK.
  absl::Status Accept(const v1::ActivationFrame& wire);
  // An ActivationReceiver reading this inbox (for the StageExecutor).
  std::unique_ptr<ActivationReceiver> MakeReceiver();
  void Close() { queue_.Close(); }
  uint64_t rejected() const { return rejected_.load(); }

 private:
  const FrameExpectations expect_;
  BoundedQueue<StageFrame> queue_;
  std::atomic<uint64_t> rejected_{0};
};

// StagePipe service: routes incoming frames to the current inbox (set when a stage loads).
// It reads raw bytes and parses them itself, so that bytes which are not a frame end the
// stream with INVALID_ARGUMENT and a logged reason instead of looking like a clean close.
class StagePipeService final
    : public v1::StagePipe::WithRawCallbackMethod_Forward<v1::StagePipe::Service> {
 public:
  void SetInbox(std::shared_ptr<FrameInbox> inbox);
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Forward(
      grpc::CallbackServerContext* ctx) override;
  // Validates and queues one parsed frame from `peer`, by either transport (gRPC here, TCP
  // in tcp_link.h). A rejected frame is logged and answered: the FrameAck to send back;
  // nullopt when the frame was accepted.
  std::optional<v1::FrameAck> Deliver(const v1::ActivationFrame& frame, const std::string& peer);

 private:
  std::mutex mu_;
  std::shared_ptr<FrameInbox> inbox_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cascade

#endif  // CASCADE_WORKER_GRPC_LINK_H_
