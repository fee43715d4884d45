#include "worker/activation_channel.h"

namespace cascade {
namespace {

using FrameQueue = BoundedQueue<StageFrame>;

class InProcessSender : public ActivationSender {
 public:
  explicit InProcessSender(std::shared_ptr<FrameQueue> q) : q_(std::move(q)) {}
  absl::Status Send(StageFrame frame) override {
    if (!q_->Push(std::move(frame))) return absl::UnavailableError("in-process link is closed");
    return absl::OkStatus();
  }
  void Close() override { q_->Close(); }

 private:
  std::shared_ptr<FrameQueue> q_;
};

class InProcessReceiver : public ActivationReceiver {
 public:
  explicit InProcessReceiver(std::shared_ptr<FrameQueue> q) : q_(std::move(q)) {}
  std::optional<StageFrame> Receive() override { return q_->Pop(); }
  void Close() override { q_->Close(); }

 private:
  std::shared_ptr<FrameQueue> q_;
};

}  // namespace

InProcessLink MakeInProcessLink(size_t capacity) {
  auto q = std::make_shared<FrameQueue>(capacity);
  return {std::make_unique<InProcessSender>(q), std::make_unique<InProcessReceiver>(q)};
}

}  // namespace cascade
