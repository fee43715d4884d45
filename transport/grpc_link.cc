#include "transport/grpc_link.h"

#include <atomic>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "transport/grpc_util.h"
#include "transport/reconnecting_link.h"
#include "util/logging.h"

namespace cascade {
namespace {

// One gRPC stream of messages to a peer. `Stream` is the stub's writer type; a reader
// thread (Forward streams only) takes the peer's rejection notices.
template <typename Message, typename Stream>
class GrpcConnection : public Connection {
 public:
  GrpcConnection(std::unique_ptr<grpc::ClientContext> ctx, std::unique_ptr<Stream> stream)
      : ctx_(std::move(ctx)), stream_(std::move(stream)) {}
  ~GrpcConnection() override { Finish(false); }

  void StartReader(AckHandler on_ack) {
    reader_ = std::thread([this, on_ack = std::move(on_ack)] {
      v1::FrameAck ack;
      while (stream_->Read(&ack)) {
        if (on_ack) on_ack(ack);
      }
      broken_.store(true);
    });
  }
  absl::Status Write(const google::protobuf::MessageLite& msg) override {
    if (!stream_->Write(static_cast<const Message&>(msg))) {
      broken_.store(true);
      return absl::UnavailableError("the stream ended");
    }
    return absl::OkStatus();
  }
  bool broken() const override { return broken_.load(); }
  void Finish(bool graceful) override {
    if (finished_) return;
    finished_ = true;
    if (graceful) {
      stream_->WritesDone();
    } else {
      ctx_->TryCancel();
    }
    if (reader_.joinable()) reader_.join();
    stream_->Finish().IgnoreError();
  }

 private:
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<Stream> stream_;
  std::thread reader_;
  std::atomic<bool> broken_{false};
  bool finished_ = false;
};

using ForwardConnection =
    GrpcConnection<v1::ActivationFrame,
                   grpc::ClientReaderWriter<v1::ActivationFrame, v1::FrameAck>>;
using ResultsConnection = GrpcConnection<v1::StepResult, grpc::ClientWriter<v1::StepResult>>;

// Dials by waiting for the channel (created once, so its backoff state carries over) to
// connect, then opening a stream.
template <typename Service>
class GrpcDialer : public Dialer {
 public:
  GrpcDialer(const HostPort& target, AckHandler on_ack)
      : channel_(MakeChannel(target.ToString())),
        stub_(Service::NewStub(channel_)),
        on_ack_(std::move(on_ack)) {}

  absl::StatusOr<std::unique_ptr<Connection>> Dial(std::chrono::milliseconds timeout) override {
    if (!channel_->WaitForConnected(std::chrono::system_clock::now() + timeout)) {
      return absl::UnavailableError("no connection");
    }
    auto ctx = std::make_unique<grpc::ClientContext>();
    if constexpr (std::is_same_v<Service, v1::StagePipe>) {
      auto stream = stub_->Forward(ctx.get());
      auto conn = std::make_unique<ForwardConnection>(std::move(ctx), std::move(stream));
      conn->StartReader(on_ack_);
      return std::unique_ptr<Connection>(std::move(conn));
    } else {
      auto stream = stub_->Results(ctx.get(), &results_ack_);
      return std::unique_ptr<Connection>(
          std::make_unique<ResultsConnection>(std::move(ctx), std::move(stream)));
    }
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<typename Service::Stub> stub_;
  AckHandler on_ack_;
  v1::ResultsAck results_ack_;  // the Results call's response (empty), written at its end
};

}  // namespace

std::unique_ptr<ActivationSender> MakeGrpcActivationSender(const HostPort& target,
                                                           const SenderOptions& options) {
  return std::make_unique<NetworkActivationSender>(
      "next stage at " + target.ToString(),
      [target](AckHandler on_ack) {
        return std::make_unique<GrpcDialer<v1::StagePipe>>(target, std::move(on_ack));
      },
      options);
}

std::unique_ptr<ResultSender> MakeGrpcResultSender(const HostPort& target,
                                                   const SenderOptions& options) {
  return std::make_unique<NetworkResultSender>(
      "coordinator at " + target.ToString(),
      std::make_unique<GrpcDialer<v1::ResultSink>>(target, nullptr), options);
}

namespace {

// One inbound Forward stream: parse each message, route it, answer rejections.
class ForwardReactor : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  ForwardReactor(FrameRouter* router, std::string peer) : router_(router), peer_(std::move(peer)) {
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
    auto delivered = router_->Deliver(frame, peer_);
    if (!delivered.ok()) {  // not from this plan's link: end the stream, say nothing more
      FinishOnce(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "wrong link key"));
      return;
    }
    if (*delivered) QueueAck(**delivered);
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

  // The gRPC callback API's ownership rule: the reactor deletes itself when the call ends.
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

  FrameRouter* router_;
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
  // gRPC owns the reactor: OnDone deletes it.
  return new ForwardReactor(router_, ctx->peer());
}

grpc::Status ResultSinkService::Results(grpc::ServerContext* ctx,
                                        grpc::ServerReader<v1::StepResult>* reader,
                                        v1::ResultsAck*) {
  v1::StepResult wire;
  while (reader->Read(&wire)) {
    if (absl::Status st = results_(wire, ctx->peer()); !st.ok()) return ToGrpc(st);
  }
  return grpc::Status::OK;
}

}  // namespace cascade
