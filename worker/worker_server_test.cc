// Tests of the worker process's services that need no coordinator: the data-plane address
// it advertises, and LoadStage's checks of the addresses it is given.
#include "worker/worker_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "transport/grpc_util.h"
#include "transport/tcp_wire.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(WorkerServer, AdvertisesItsTcpDataPlaneUnlessOff) {
  WorkerOptions o;
  o.listen = "127.0.0.1:0";
  auto w = WorkerServer::Start(o);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_THAT((*w)->data_address(), StartsWith("tcp://127.0.0.1:"));
  auto a = ParseAddress((*w)->data_address());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_GT(a->host_port.port, 0);
  // Something listens there.
  EXPECT_TRUE(ConnectTcp(a->host_port, std::chrono::seconds(2)).ok());
  (*w)->Shutdown();

  o.data_listen = "off";
  auto grpc_only = WorkerServer::Start(o);
  ASSERT_TRUE(grpc_only.ok()) << grpc_only.status();
  EXPECT_EQ((*grpc_only)->data_address(), "");
}

TEST(WorkerServer, ControlCallsNeedTheCoordinatorItRegisteredWith) {
  WorkerOptions o;
  o.listen = "127.0.0.1:0";
  auto w = WorkerServer::Start(o);
  ASSERT_TRUE(w.ok()) << w.status();
  auto stub = v1::Worker::NewStub(MakeChannel((*w)->address()));
  // Not registered with anyone: nobody may load, unload or drain it.
  v1::LoadStageRequest req;
  req.set_model_path("/etc/passwd");
  grpc::ClientContext ctx;
  v1::LoadStageResponse resp;
  const grpc::Status st = stub->LoadStage(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("not registered"));
  grpc::ClientContext ctx2;
  v1::UnloadResponse u;
  EXPECT_EQ(stub->Unload(&ctx2, v1::UnloadRequest(), &u).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  grpc::ClientContext ctx3;
  v1::DrainResponse d;
  EXPECT_EQ(stub->Drain(&ctx3, v1::DrainRequest(), &d).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // Anyone may ask how it is.
  grpc::ClientContext ctx4;
  v1::WorkerStatus status;
  EXPECT_TRUE(stub->Status(&ctx4, v1::StatusRequest(), &status).ok());
  EXPECT_EQ(status.state(), v1::WORKER_STATE_IDLE);
}

}  // namespace
}  // namespace cascade
