// ReconnectingLink: the sending end of one network data-plane link, shared by every
// network transport. A transport supplies a Dialer that opens a Connection to the peer;
// this class connects lazily, reconnects after a break, serializes writers, and stops
// promptly when told to. NetworkActivationSender / NetworkResultSender put the frame codec
// on top, so gRPC and TCP links differ only in their Dialer.
//
// Contract:
// - Send connects on first use, retrying a refused or timed-out dial for up to
//   `connect_timeout` (in slices of at most 100 ms), and fails with Unavailable naming
//   the peer ("<peer> is unreachable: <last error>") when that runs out.
// - A connection that broke (its reader saw the peer go, or a write failed) is dropped and
//   the next Send dials again; the Send whose write failed returns Unavailable ("link to
//   <peer> is down: ...") and the message is not resent.
// - Close() ends the connection gracefully (the peer reads what was sent, waited for up to
//   2 s) and makes every later Send fail at once; Abort() drops it without waiting; Close() and StopReconnecting() make a
//   Send that is waiting to connect give up within 100 ms ("link to <peer> is closing").
// - Thread-safe; Send calls are serialized.
#ifndef CASCADE_TRANSPORT_RECONNECTING_LINK_H_
#define CASCADE_TRANSPORT_RECONNECTING_LINK_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/data_plane.pb.h"
#include "google/protobuf/message_lite.h"
#include "transport/link.h"

namespace cascade {

// One open message stream to a peer.
class Connection {
 public:
  virtual ~Connection() = default;
  // Writes one message; Unavailable when the connection is down.
  virtual absl::Status Write(const google::protobuf::MessageLite& msg) = 0;
  // True once the peer closed the stream or it failed.
  virtual bool broken() const = 0;
  // Ends the stream. graceful: the peer reads everything written first (waiting at most
  // a few seconds); otherwise it is dropped at once.
  virtual void Finish(bool graceful) = 0;
};

// Opens connections to one peer.
class Dialer {
 public:
  virtual ~Dialer() = default;
  // One attempt, waiting at most `timeout`.
  virtual absl::StatusOr<std::unique_ptr<Connection>> Dial(std::chrono::milliseconds timeout) = 0;
};

// What a peer answers about a frame it refused (activation links only).
using AckHandler = std::function<void(const v1::FrameAck&)>;

class ReconnectingLink {
 public:
  // `peer` names the other end in messages, e.g. "next stage at tcp://10.0.0.2:7001".
  ReconnectingLink(std::string peer, std::unique_ptr<Dialer> dialer,
                   std::chrono::milliseconds connect_timeout);
  ~ReconnectingLink();
  ReconnectingLink(const ReconnectingLink&) = delete;
  ReconnectingLink& operator=(const ReconnectingLink&) = delete;

  absl::Status Send(const google::protobuf::MessageLite& msg) ABSL_LOCKS_EXCLUDED(mu_);
  void Close() ABSL_LOCKS_EXCLUDED(mu_) { End(/*graceful=*/true); }
  // As Close, but drops the connection without waiting for the peer.
  void Abort() ABSL_LOCKS_EXCLUDED(mu_) { End(/*graceful=*/false); }
  void StopReconnecting() { closing_.store(true); }
  const std::string& peer() const { return peer_; }

 private:
  absl::Status ConnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void End(bool graceful) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string peer_;
  const std::unique_ptr<Dialer> dialer_;
  const std::chrono::milliseconds connect_timeout_;
  std::atomic<bool> closing_{false};  // set before Close takes mu_, read while dialing
  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<Connection> conn_ ABSL_GUARDED_BY(mu_);
};

// Activation frames over a ReconnectingLink: encodes each frame (transport/frame.h) and
// counts the rejections the peer answers with.
class NetworkActivationSender : public ActivationSender {
 public:
  // `make_dialer` is given the handler for the peer's rejection notices.
  NetworkActivationSender(std::string peer,
                          const std::function<std::unique_ptr<Dialer>(AckHandler)>& make_dialer,
                          const SenderOptions& options);
  absl::Status Send(StageFrame frame) override ABSL_LOCKS_EXCLUDED(mu_);
  void Close() override { link_->Close(); }
  void Abort() override { link_->Abort(); }
  void StopReconnecting() override { link_->StopReconnecting(); }
  uint64_t rejected() const override { return rejected_->load(); }

 private:
  std::shared_ptr<std::atomic<uint64_t>> rejected_;
  const std::string link_key_;
  absl::Mutex mu_;
  v1::ActivationFrame wire_ ABSL_GUARDED_BY(mu_);  // reused between Sends
  std::unique_ptr<ReconnectingLink> link_;
};

// Step results over a ReconnectingLink.
class NetworkResultSender : public ResultSender {
 public:
  NetworkResultSender(std::string peer, std::unique_ptr<Dialer> dialer,
                      const SenderOptions& options);
  absl::Status Send(StepResult result) override ABSL_LOCKS_EXCLUDED(mu_);
  void Close() override { link_.Close(); }
  void Abort() override { link_.Abort(); }
  void StopReconnecting() override { link_.StopReconnecting(); }

 private:
  const std::string link_key_;
  absl::Mutex mu_;
  v1::StepResult wire_ ABSL_GUARDED_BY(mu_);
  ReconnectingLink link_;
};

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_RECONNECTING_LINK_H_
