#include "transport/inbox.h"

#include "absl/strings/str_cat.h"
#include "util/logging.h"

namespace cascade {
namespace {

class InboxReceiver : public ActivationReceiver {
 public:
  explicit InboxReceiver(BoundedQueue<StageFrame>* q) : q_(q) {}
  std::optional<StageFrame> Receive() override { return q_->Pop(); }
  void Close() override { q_->Close(); }

 private:
  BoundedQueue<StageFrame>* q_;
};

}  // namespace

absl::Status FrameInbox::Accept(const v1::ActivationFrame& wire) {
  absl::StatusOr<StageFrame> frame = DecodeFrame(wire, expect_);
  if (!frame.ok() && frame.status().code() == absl::StatusCode::kPermissionDenied) {
    rejected_.fetch_add(1);
    return frame.status();  // not from this plan's link: it may not touch any batch
  }
  if (!frame.ok()) {
    rejected_.fetch_add(1);
    // Tell the rest of the pipeline that this batch is lost.
    StageFrame err;
    err.plan_id = expect_.plan_id;
    err.batch_id = wire.batch_id();
    err.stage = expect_.stage;
    err.error =
        absl::StrCat("stage ", expect_.stage, " rejected the frame: ", frame.status().message());
    queue_.Push(std::move(err));
    return frame.status();
  }
  if (!queue_.Push(std::move(*frame))) return absl::UnavailableError("stage is unloading");
  return absl::OkStatus();
}

std::unique_ptr<ActivationReceiver> FrameInbox::MakeReceiver() {
  return std::make_unique<InboxReceiver>(&queue_);
}

void FrameRouter::SetInbox(std::shared_ptr<FrameInbox> inbox) {
  absl::MutexLock lock(&mu_);
  inbox_ = std::move(inbox);
}

absl::StatusOr<std::optional<v1::FrameAck>> FrameRouter::Deliver(
    const v1::ActivationFrame& frame, const std::string& peer) {
  std::shared_ptr<FrameInbox> inbox;
  {
    absl::MutexLock lock(&mu_);
    inbox = inbox_;
  }
  const absl::Status st = inbox
                              ? inbox->Accept(frame)
                              : absl::FailedPreconditionError("no stage is loaded on this worker");
  if (st.ok()) return std::optional<v1::FrameAck>();
  rejected_.fetch_add(1);
  spdlog::warn("frame {} from {} rejected: {}", frame.batch_id(), peer, st.message());
  if (st.code() == absl::StatusCode::kPermissionDenied) return st;
  v1::FrameAck ack;
  ack.set_batch_id(frame.batch_id());
  ack.set_error(std::string(st.message()));
  return std::optional<v1::FrameAck>(std::move(ack));
}

}  // namespace cascade
