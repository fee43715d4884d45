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

TEST(WorkerServer, LoadStageRejectsAMalformedDataAddress) {
  WorkerOptions o;
  o.listen = "127.0.0.1:0";
  auto w = WorkerServer::Start(o);
  ASSERT_TRUE(w.ok()) << w.status();
  auto stub = v1::Worker::NewStub(MakeChannel((*w)->address()));
  v1::LoadStageRequest req;
  req.set_plan_id(1);
  req.set_model_path(std::string(CASCADE_SOURCE_DIR) + "/models/stories260K.gguf");
  req.set_stage_index(0);
  req.set_num_stages(2);
  req.set_first_layer(0);
  req.set_last_layer(2);
  req.set_kv_blocks(16);
  req.set_kv_block_size(16);
  req.set_max_batch_tokens(64);
  req.set_next_address("tcp://no-port-here");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::LoadStageResponse resp;
  const grpc::Status st = stub->LoadStage(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("tcp://no-port-here"));
  // The worker still serves: its status answers.
  grpc::ClientContext ctx2;
  v1::WorkerStatus status;
  EXPECT_TRUE(stub->Status(&ctx2, v1::StatusRequest(), &status).ok());
}

}  // namespace
}  // namespace cascade
