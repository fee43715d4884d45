// Tests of the gRPC activation and result links' failure paths: a peer that cannot be
// reached gives a clear Unavailable error, and Close() stops a sender that is waiting to
// connect long before its connect timeout, so a stage can unload while its neighbour or
// the coordinator is gone.
#include "transport/grpc_link.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>

namespace cascade {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Nothing listens on port 1 of the loopback (privileged, never bound by these tests), so
// connecting is refused and the channel keeps retrying until its deadline.
const HostPort kNobody{"127.0.0.1", 1};

StepResult SomeResult() {
  StepResult r;
  r.plan_id = 1;
  r.batch_id = 7;
  return r;
}

StageFrame SomeFrame() {
  StageFrame f;
  f.plan_id = 1;
  f.batch_id = 7;
  return f;
}

TEST(GrpcResultSender, UnreachableCoordinatorIsNamedInTheError) {
  auto sender = MakeGrpcResultSender(kNobody, {.connect_timeout = milliseconds(300)});
  absl::Status st = sender->Send(SomeResult());
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("coordinator at 127.0.0.1:1"), std::string::npos) << st;
}

// Starts sender.Send(item) toward a peer that cannot be reached (60 s connect timeout),
// calls stop() 200 ms later and returns what the Send returned; "timeout" if it was still
// waiting 20 s after stop().
template <typename Sender, typename Item, typename Stop>
absl::Status SendThenStop(Sender& sender, Item item, Stop stop) {
  auto send = std::async(std::launch::async, [&] { return sender.Send(std::move(item)); });
  std::this_thread::sleep_for(milliseconds(200));
  stop();
  if (send.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    send.wait();
    return absl::DeadlineExceededError("Send still waiting 20 s after the stop");
  }
  return send.get();
}

TEST(GrpcResultSender, CloseStopsASendWaitingToConnect) {
  auto owned = MakeGrpcResultSender(kNobody, {.connect_timeout = std::chrono::seconds(60)});
  ResultSender& sender = *owned;
  const absl::Status st = SendThenStop(sender, SomeResult(), [&] { sender.Close(); });
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  // Closed for good: no new connection attempt.
  EXPECT_EQ(sender.Send(SomeResult()).code(), absl::StatusCode::kUnavailable);
}

TEST(GrpcActivationSender, CloseStopsASendWaitingToConnect) {
  auto owned = MakeGrpcActivationSender(kNobody, {.connect_timeout = std::chrono::seconds(60)});
  ActivationSender& sender = *owned;
  const absl::Status st = SendThenStop(sender, SomeFrame(), [&] { sender.Close(); });
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_EQ(sender.Send(SomeFrame()).code(), absl::StatusCode::kUnavailable);
}

TEST(GrpcActivationSender, StopReconnectingStopsASendWaitingToConnect) {
  // What a stopping stage does before draining its queue: a dead next stage must not hold
  // each remaining frame for the connect timeout.
  auto owned = MakeGrpcActivationSender(kNobody, {.connect_timeout = std::chrono::seconds(60)});
  ActivationSender& sender = *owned;
  const absl::Status st = SendThenStop(sender, SomeFrame(), [&] { sender.StopReconnecting(); });
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("link to next stage at 127.0.0.1:1 is closing"), std::string::npos)
      << st;
  const auto start = steady_clock::now();
  EXPECT_EQ(sender.Send(SomeFrame()).code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(GrpcActivationSender, UnreachableNextStageIsNamedInTheError) {
  auto sender = MakeGrpcActivationSender(kNobody, {.connect_timeout = milliseconds(300)});
  absl::Status st = sender->Send(SomeFrame());
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("next stage at 127.0.0.1:1"), std::string::npos) << st;
}

}  // namespace
}  // namespace cascade
