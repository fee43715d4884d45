// Tests of the gRPC activation and result links' failure paths: a peer that cannot be
// reached gives a clear Unavailable error, and Close() stops a sender that is waiting to
// connect long before its connect timeout, so a stage can unload while its neighbour or
// the coordinator is gone.
#include "worker/grpc_link.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>

namespace cascade {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Nothing listens on port 1 of the loopback (privileged, never bound by these tests), so
// connecting is refused and the channel keeps retrying until its deadline.
constexpr char kNobody[] = "127.0.0.1:1";

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
  GrpcResultSender sender(kNobody, milliseconds(300));
  absl::Status st = sender.Send(SomeResult());
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("coordinator at 127.0.0.1:1"), std::string::npos) << st;
}

TEST(GrpcResultSender, CloseStopsASendWaitingToConnect) {
  GrpcResultSender sender(kNobody, std::chrono::seconds(60));
  const auto start = steady_clock::now();
  auto send = std::async(std::launch::async, [&] { return sender.Send(SomeResult()); });
  std::this_thread::sleep_for(milliseconds(200));
  sender.Close();
  ASSERT_EQ(send.wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "Send still waiting 20 s after Close";
  EXPECT_EQ(send.get().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(20));
  // Closed for good: no new connection attempt.
  EXPECT_EQ(sender.Send(SomeResult()).code(), absl::StatusCode::kUnavailable);
}

TEST(GrpcActivationSender, CloseStopsASendWaitingToConnect) {
  GrpcActivationSender sender(kNobody, std::chrono::seconds(60));
  auto send = std::async(std::launch::async, [&] { return sender.Send(SomeFrame()); });
  std::this_thread::sleep_for(milliseconds(200));
  sender.Close();
  ASSERT_EQ(send.wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "Send still waiting 20 s after Close";
  EXPECT_EQ(send.get().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(sender.Send(SomeFrame()).code(), absl::StatusCode::kUnavailable);
}

TEST(GrpcActivationSender, StopReconnectingStopsASendWaitingToConnect) {
  // What a stopping stage does before draining its queue: a dead next stage must not hold
  // each remaining frame for the connect timeout.
  GrpcActivationSender sender(kNobody, std::chrono::seconds(60));
  auto send = std::async(std::launch::async, [&] { return sender.Send(SomeFrame()); });
  std::this_thread::sleep_for(milliseconds(200));
  sender.StopReconnecting();
  ASSERT_EQ(send.wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "Send still waiting 20 s after StopReconnecting";
  const absl::Status stopped = send.get();
  EXPECT_EQ(stopped.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(stopped.message().find("link to next stage at 127.0.0.1:1 is closing"),
            std::string::npos)
      << stopped;
  const auto start = steady_clock::now();
  EXPECT_EQ(sender.Send(SomeFrame()).code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(GrpcActivationSender, UnreachableNextStageIsNamedInTheError) {
  GrpcActivationSender sender(kNobody, milliseconds(300));
  absl::Status st = sender.Send(SomeFrame());
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("next stage at 127.0.0.1:1"), std::string::npos) << st;
}

}  // namespace
}  // namespace cascade
