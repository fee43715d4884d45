// The StageHost's life cycle without a coordinator: a load that takes long does not hold
// up status and heartbeats, a failed load leaves a clear FAILED state and the host
// loadable again, and drain/unload leave it idle.
#include "worker/stage_host.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <future>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_models.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

v1::LoadStageRequest Request(const std::string& model) {
  v1::LoadStageRequest req;
  req.set_plan_id(7);
  req.set_model_path(model);
  req.set_stage_index(0);
  req.set_num_stages(1);
  req.set_first_layer(0);
  req.set_last_layer(5);
  req.set_kv_blocks(32);
  req.set_kv_block_size(16);
  req.set_max_batch_tokens(64);
  req.set_coordinator_address("tcp://127.0.0.1:1");  // never reached in these tests
  req.set_device("cpu");
  return req;
}

TEST(StageHost, StatusAndHeartbeatsAnswerWhileALoadIsUnderWay) {
  // A model "file" that is a FIFO: opening it blocks until a writer appears, so the load
  // is held in the middle for as long as the test wants, with no timing involved.
  const std::string fifo = ::testing::TempDir() + "/slow_model_" + std::to_string(::getpid());
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  FrameRouter router;
  StageHost host({.threads = 1, .device = {DeviceKind::kCpu, 0}, .model_dir = {}, .tp = nullptr},
                 &router);
  auto load = std::async(std::launch::async, [&] { return host.Load(Request(fifo)); });
  // Heartbeats see LOADING while the load is blocked.
  bool saw_loading = false;
  for (int i = 0; i < 2000 && !saw_loading; ++i) {
    v1::HeartbeatRequest hb;
    host.FillHeartbeat(&hb);
    saw_loading = hb.state() == v1::WORKER_STATE_LOADING;
    if (!saw_loading) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(saw_loading);
  EXPECT_EQ(load.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  for (int i = 0; i < 10; ++i) {
    v1::WorkerStatus st;
    host.FillStatus(&st);  // would block here if the load held the status lock
    EXPECT_EQ(st.state(), v1::WORKER_STATE_LOADING);
  }
  // Let the load go on: the writer closes at once, so the "file" is empty.
  const int fd = ::open(fifo.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ::close(fd);
  auto result = load.get();
  EXPECT_FALSE(result.ok());
  v1::HeartbeatRequest hb;
  host.FillHeartbeat(&hb);
  EXPECT_EQ(hb.state(), v1::WORKER_STATE_FAILED);
  EXPECT_FALSE(hb.error().empty());
  ::unlink(fifo.c_str());

  // The host loads a real model after the failure.
  auto ok = host.Load(Request(testing::BundledModel()));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(host.state(), v1::WORKER_STATE_SERVING);
  EXPECT_GT(ok->weight_bytes(), 0u);
}

TEST(StageHost, AnF16KvCacheIsLoadedAtHalfTheBytes) {
  FrameRouter router;
  StageHost host({.threads = 1, .device = {DeviceKind::kCpu, 0}, .model_dir = {}, .tp = nullptr},
                 &router);
  auto f32 = host.Load(Request(testing::BundledModel()));
  ASSERT_TRUE(f32.ok()) << f32.status();
  auto req = Request(testing::BundledModel());
  req.set_kv_type(v1::KV_CACHE_TYPE_F16);
  auto f16 = host.Load(req);
  ASSERT_TRUE(f16.ok()) << f16.status();
  EXPECT_GT(f16->kv_bytes(), 0u);
  EXPECT_EQ(f16->kv_bytes() * 2, f32->kv_bytes());
}

TEST(StageHost, BadRequestsAreRefusedBeforeAnythingChanges) {
  FrameRouter router;
  StageHost host({.threads = 1, .device = {DeviceKind::kCpu, 0}, .model_dir = {}, .tp = nullptr},
                 &router);
  ASSERT_TRUE(host.Load(Request(testing::BundledModel())).ok());
  auto bad = Request(testing::BundledModel());
  bad.set_device("tpu");
  EXPECT_THAT(std::string(host.Load(bad).status().message()), HasSubstr("'tpu'"));
  bad = Request(testing::BundledModel());
  bad.set_stage_index(3);
  EXPECT_THAT(std::string(host.Load(bad).status().message()), HasSubstr("not a valid stage"));
  bad = Request(testing::BundledModel());
  bad.set_coordinator_address("tcp://no-port");
  EXPECT_THAT(std::string(host.Load(bad).status().message()), HasSubstr("tcp://no-port"));
  bad = Request(testing::BundledModel());
  bad.set_kv_type(static_cast<v1::KvCacheType>(7));
  EXPECT_THAT(std::string(host.Load(bad).status().message()), HasSubstr("kv_type 7"));
  // The loaded stage is untouched by the refusals.
  EXPECT_EQ(host.state(), v1::WORKER_STATE_SERVING);
  v1::WorkerStatus st;
  host.FillStatus(&st);
  EXPECT_EQ(st.plan_id(), 7u);
}

TEST(StageHost, UnloadOnlyItsPlanAndDrainLeaveItIdle) {
  FrameRouter router;
  StageHost host({.threads = 1, .device = {DeviceKind::kCpu, 0}, .model_dir = {}, .tp = nullptr},
                 &router);
  ASSERT_TRUE(host.Load(Request(testing::BundledModel())).ok());
  EXPECT_EQ(host.Unload(8).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(host.state(), v1::WORKER_STATE_SERVING);
  ASSERT_TRUE(host.Unload(7).ok());
  EXPECT_EQ(host.state(), v1::WORKER_STATE_IDLE);
  // With nothing loaded, frames are refused and counted.
  v1::ActivationFrame f;
  f.set_version(kFrameVersion);
  f.set_batch_id(3);
  auto ack = router.Deliver(f, "test");
  ASSERT_TRUE(ack.ok() && ack->has_value());
  EXPECT_THAT((*ack)->error(), HasSubstr("no stage is loaded"));
  v1::WorkerStatus st;
  ASSERT_TRUE(host.Load(Request(testing::BundledModel())).ok());
  host.FillStatus(&st);
  EXPECT_EQ(st.stats().rejected_frames(), 1u);
  host.Drain();
  EXPECT_EQ(host.state(), v1::WORKER_STATE_IDLE);
}

}  // namespace
}  // namespace cascade
