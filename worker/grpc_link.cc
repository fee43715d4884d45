#include "worker/grpc_link.h"

#include <algorithm>
#include <deque>
#include <optional>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "util/logging.h"
#include "worker/grpc_util.h"

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

// ---------------------------------------------------------------- sender

GrpcActivationSender::GrpcActivationSender(std::string address,
                                           std::chrono::milliseconds connect_timeout)
    : address_(std::move(address)), connect_timeout_(connect_timeout) {}

GrpcActivationSender::~GrpcActivationSender() { Close(); }

namespace {

// Waits up to `timeout` for the channel to connect, in slices of 100 ms so that `closing`
// stops the wait early. `peer` names the other end in the error.
absl::Status WaitConnected(grpc::Channel& channel, std::chrono::milliseconds timeout,
                           const std::atomic<bool>& closing, const std::string& peer) {
  const auto deadline = std::chrono::system_clock::now() + timeout;
  for (;;) {
    if (closing.load()) {
      return absl::UnavailableError(absl::StrCat("link to ", peer, " is closing"));
    }
    const auto slice =
        std::min(deadline, std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    if (channel.WaitForConnected(slice)) return absl::OkStatus();
    if (slice == deadline) return absl::UnavailableError(absl::StrCat(peer, " is unreachable"));
  }
}

}  // namespace

absl::Status GrpcActivationSender::Connect() {
  if (!channel_) {
    channel_ = MakeChannel(address_);
    stub_ = v1::StagePipe::NewStub(channel_);
  }
  if (absl::Status st =
          WaitConnected(*channel_, connect_timeout_, closing_, "next stage at " + address_);
      !st.ok()) {
    return st;
  }
  ctx_ = std::make_unique<grpc::ClientContext>();
  stream_ = stub_->Forward(ctx_.get());
  broken_ = std::make_shared<std::atomic<bool>>(false);
  auto* stream = stream_.get();
  auto broken = broken_;
  const std::string peer = address_;
  std::atomic<uint64_t>* rejected = &rejected_;
  ack_reader_ = std::thread([stream, broken, peer, rejected] {
    v1::FrameAck ack;
    while (stream->Read(&ack)) {
      if (!ack.error().empty()) {
        rejected->fetch_add(1);
        spdlog::warn("stage at {} rejected batch {}: {}", peer, ack.batch_id(), ack.error());
      }
    }
    broken->store(true);
  });
  return absl::OkStatus();
}

void GrpcActivationSender::Disconnect() {
  if (stream_) {
    ctx_->TryCancel();
    if (ack_reader_.joinable()) ack_reader_.join();
    stream_->Finish().IgnoreError();
  }
  stream_.reset();
  ctx_.reset();
}

absl::Status GrpcActivationSender::Send(StageFrame frame) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return absl::UnavailableError("link is closed");
  if (stream_ && broken_->load()) {
    spdlog::warn("link to {} broke; reconnecting", address_);
    Disconnect();
  }
  if (!stream_) {
    if (absl::Status st = Connect(); !st.ok()) return st;
  }
  EncodeFrame(frame, &wire_);
  if (!stream_->Write(wire_)) {
    broken_->store(true);
    return absl::UnavailableError(absl::StrCat("link to the next stage at ", address_, " is down"));
  }
  return absl::OkStatus();
}

void GrpcActivationSender::Close() {
  closing_.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  if (stream_) {
    stream_->WritesDone();
    if (ack_reader_.joinable()) ack_reader_.join();
    stream_->Finish().IgnoreError();
    stream_.reset();
  }
}

// ---------------------------------------------------------------- results

GrpcResultSender::GrpcResultSender(std::string address, std::chrono::milliseconds connect_timeout)
    : address_(std::move(address)), connect_timeout_(connect_timeout) {}

GrpcResultSender::~GrpcResultSender() { Close(); }

void GrpcResultSender::Close() {
  closing_.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  if (stream_) {
    stream_->WritesDone();
    stream_->Finish().IgnoreError();
    stream_.reset();
  }
}

absl::Status GrpcResultSender::Connect() {
  if (!channel_) {
    channel_ = MakeChannel(address_);
    stub_ = v1::Coordinator::NewStub(channel_);
  }
  if (absl::Status st =
          WaitConnected(*channel_, connect_timeout_, closing_, "coordinator at " + address_);
      !st.ok()) {
    return st;
  }
  ctx_ = std::make_unique<grpc::ClientContext>();
  stream_ = stub_->Results(ctx_.get(), &ack_);
  return absl::OkStatus();
}

void GrpcResultSender::Disconnect() {
  if (stream_) {
    ctx_->TryCancel();
    stream_->Finish().IgnoreError();
  }
  stream_.reset();
  ctx_.reset();
}

absl::Status GrpcResultSender::Send(StepResult result) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return absl::UnavailableError("link is closed");
  EncodeResult(result, &wire_);
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!stream_) {
      if (absl::Status st = Connect(); !st.ok()) return st;
    }
    if (stream_->Write(wire_)) return absl::OkStatus();
    spdlog::warn("results stream to {} broke; reconnecting", address_);
    Disconnect();
  }
  return absl::UnavailableError(absl::StrCat("coordinator at ", address_, " is unreachable"));
}

// ---------------------------------------------------------------- receiving end

absl::Status FrameInbox::Accept(const v1::ActivationFrame& wire) {
  absl::StatusOr<StageFrame> frame = DecodeFrame(wire, expect_);
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

void StagePipeService::SetInbox(std::shared_ptr<FrameInbox> inbox) {
  std::lock_guard<std::mutex> lock(mu_);
  inbox_ = std::move(inbox);
}

std::optional<v1::FrameAck> StagePipeService::Deliver(const v1::ActivationFrame& frame,
                                                      const std::string& peer) {
  std::shared_ptr<FrameInbox> inbox;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox = inbox_;
  }
  const absl::Status st = inbox
                              ? inbox->Accept(frame)
                              : absl::FailedPreconditionError("no stage is loaded on this worker");
  if (st.ok()) return std::nullopt;
  spdlog::warn("frame {} from {} rejected: {}", frame.batch_id(), peer, st.message());
  v1::FrameAck ack;
  ack.set_batch_id(frame.batch_id());
  ack.set_error(std::string(st.message()));
  return ack;
}

namespace {

// One inbound Forward stream: parse each message, route it, answer rejections.
class ForwardReactor : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  ForwardReactor(StagePipeService* service, std::string peer)
      : service_(service), peer_(std::move(peer)) {
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the peer closed its side (or the call broke)
      FinishOnce(grpc::Status::OK);
      return;
    }
    v1::ActivationFrame frame;
    grpc::ProtoBufferReader reader(&in_);
    if (!frame.ParseFromZeroCopyStream(&reader)) {
      const std::string why =
          absl::StrCat("undecodable activation frame (", in_.Length(), " bytes)");
      spdlog::warn("stream from {} closed: {}", peer_, why);
      FinishOnce(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why));
      return;
    }
    if (std::optional<v1::FrameAck> ack = service_->Deliver(frame, peer_)) QueueAck(*ack);
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (ok && !pending_.empty()) {
      StartNextWriteLocked();
    } else if (finish_) {
      Finish(*finish_);
    }
  }

  void OnDone() override { delete this; }

 private:
  void QueueAck(const v1::FrameAck& ack) {
    grpc::ByteBuffer buf;
    bool own = false;
    if (!grpc::SerializationTraits<v1::FrameAck>::Serialize(ack, &buf, &own).ok()) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (finish_) return;
    pending_.push_back(std::move(buf));
    if (!writing_) StartNextWriteLocked();
  }
  void StartNextWriteLocked() {
    out_ = std::move(pending_.front());
    pending_.pop_front();
    writing_ = true;
    StartWrite(&out_);
  }
  void FinishOnce(grpc::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finish_) return;
    finish_ = std::move(status);
    if (!writing_) Finish(*finish_);
  }

  StagePipeService* service_;
  const std::string peer_;
  grpc::ByteBuffer in_, out_;
  std::mutex mu_;
  std::deque<grpc::ByteBuffer> pending_;
  bool writing_ = false;
  std::optional<grpc::Status> finish_;
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StagePipeService::Forward(
    grpc::CallbackServerContext* ctx) {
  return new ForwardReactor(this, ctx->peer());
}

}  // namespace cascade
