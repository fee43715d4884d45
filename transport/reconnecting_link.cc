#include "transport/reconnecting_link.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "util/logging.h"

namespace cascade {

ReconnectingLink::ReconnectingLink(std::string peer, std::unique_ptr<Dialer> dialer,
                                   std::chrono::milliseconds connect_timeout)
    : peer_(std::move(peer)), dialer_(std::move(dialer)), connect_timeout_(connect_timeout) {}

ReconnectingLink::~ReconnectingLink() { Close(); }

absl::Status ReconnectingLink::ConnectLocked() {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + connect_timeout_;
  absl::Status last = absl::UnavailableError("no attempt");
  for (;;) {
    if (closing_.load()) {
      return absl::UnavailableError(absl::StrCat("link to ", peer_, " is closing"));
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      return absl::UnavailableError(absl::StrCat(peer_, " is unreachable: ", last.message()));
    }
    const auto slice = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(100),
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
    const auto slice_end = now + slice;
    auto conn = dialer_->Dial(slice);
    if (conn.ok()) {
      conn_ = std::move(*conn);
      return absl::OkStatus();
    }
    last = conn.status();
    // A refused connection returns at once: wait out the slice instead of spinning.
    std::this_thread::sleep_until(slice_end);
  }
}

absl::Status ReconnectingLink::Send(const google::protobuf::MessageLite& msg) {
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError(absl::StrCat("link to ", peer_, " is closed"));
  if (conn_ && conn_->broken()) {
    spdlog::warn("link to {} broke; reconnecting", peer_);
    conn_->Finish(/*graceful=*/false);
    conn_.reset();
  }
  if (!conn_) {
    if (absl::Status st = ConnectLocked(); !st.ok()) return st;
  }
  if (absl::Status st = conn_->Write(msg); !st.ok()) {
    conn_->Finish(/*graceful=*/false);
    conn_.reset();
    return absl::UnavailableError(absl::StrCat("link to ", peer_, " is down: ", st.message()));
  }
  return absl::OkStatus();
}

void ReconnectingLink::End(bool graceful) {
  closing_.store(true);
  absl::MutexLock lock(&mu_);
  if (closed_) return;
  closed_ = true;
  if (conn_) {
    conn_->Finish(graceful && !conn_->broken());
    conn_.reset();
  }
}

NetworkActivationSender::NetworkActivationSender(
    std::string peer, const std::function<std::unique_ptr<Dialer>(AckHandler)>& make_dialer,
    const SenderOptions& options)
    : rejected_(std::make_shared<std::atomic<uint64_t>>(0)), link_key_(options.link_key) {
  AckHandler on_ack = [rejected = rejected_, peer](const v1::FrameAck& ack) {
    if (ack.error().empty()) return;
    rejected->fetch_add(1);
    spdlog::warn("{} rejected batch {}: {}", peer, ack.batch_id(), ack.error());
  };
  link_ = std::make_unique<ReconnectingLink>(peer, make_dialer(std::move(on_ack)),
                                             options.connect_timeout);
}

absl::Status NetworkActivationSender::Send(StageFrame frame) {
  absl::MutexLock lock(&mu_);
  EncodeFrame(frame, link_key_, &wire_);
  return link_->Send(wire_);
}

NetworkResultSender::NetworkResultSender(std::string peer, std::unique_ptr<Dialer> dialer,
                                         const SenderOptions& options)
    : link_key_(options.link_key),
      link_(std::move(peer), std::move(dialer), options.connect_timeout) {}

absl::Status NetworkResultSender::Send(StepResult result) {
  absl::MutexLock lock(&mu_);
  EncodeResult(result, link_key_, &wire_);
  return link_.Send(wire_);
}

}  // namespace cascade
