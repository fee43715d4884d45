// Tests of the limits every Cascade gRPC server applies (transport/grpc_util.h): a client's
// connection with no call in flight is closed after the idle time, and the client then
// reconnects by itself, so a process that clients only try (a standby coordinator) does not
// keep their sockets for as long as they run.
#include "transport/grpc_util.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "transport/grpc_link.h"
#include "transport/security.h"

namespace cascade {
namespace {

using std::chrono::milliseconds;
using std::chrono::system_clock;

TEST(GrpcServer, ClosesAConnectionLeftIdleAndTheClientConnectsAgain) {
  // A server needs a service; nothing calls this one.
  ResultSinkService sink(
      [](const v1::StepResult&, const std::string&) { return absl::OkStatus(); });
  grpc::ServerBuilder builder;
  ConfigureServer(&builder, /*idle_ms=*/300);
  builder.RegisterService(&sink);
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", ServerCredentials(ServerRole::kPublic), &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);

  auto channel = MakeChannel("127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(channel->WaitForConnected(system_clock::now() + milliseconds(5000)));
  ASSERT_EQ(channel->GetState(false), GRPC_CHANNEL_READY);

  // The server's GOAWAY puts the channel back to idle; keepalive pings do not count as use.
  const auto deadline = system_clock::now() + milliseconds(5000);
  while (channel->GetState(false) == GRPC_CHANNEL_READY && system_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  EXPECT_EQ(channel->GetState(false), GRPC_CHANNEL_IDLE);

  // It connects again when asked to.
  EXPECT_TRUE(channel->WaitForConnected(system_clock::now() + milliseconds(5000)));
  server->Shutdown();
}

}  // namespace
}  // namespace cascade
