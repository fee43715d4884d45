#include "coordinator/registry.h"

#include "gtest/gtest.h"

namespace cascade {
namespace {

v1::RegisterRequest Req(const std::string& id) {
  v1::RegisterRequest r;
  r.set_worker_id(id);
  r.set_listen_address(id + ":1");
  return r;
}

TEST(WorkerRegistry, HeartbeatsNeedTheSessionAndKeepAWorkerAlive) {
  WorkerRegistry reg(/*session=*/42, /*heartbeat_interval_s=*/0.05);
  EXPECT_EQ(reg.liveness_timeout(), std::chrono::milliseconds(1150));
  const v1::RegisterResponse r = reg.Register(Req("a"));
  EXPECT_EQ(r.session(), 42u);
  reg.Register(Req("b"));
  v1::HeartbeatRequest hb;
  hb.set_worker_id("a");
  hb.set_session(41);  // a stale session: register again
  EXPECT_FALSE(*reg.Heartbeat(hb));
  hb.set_session(42);
  hb.set_state(v1::WORKER_STATE_SERVING);
  // Without a's session secret, no one can speak for a; nothing changes.
  hb.set_session_secret("guess");
  EXPECT_EQ(reg.Heartbeat(hb).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(reg.All()[0].state, v1::WORKER_STATE_IDLE);
  hb.set_session_secret(r.session_secret());
  EXPECT_TRUE(*reg.Heartbeat(hb));
  hb.set_worker_id("nobody");
  EXPECT_FALSE(*reg.Heartbeat(hb));
  // Registration order, and the one liveness rule.
  auto all = reg.All();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, "a");
  EXPECT_EQ(all[0].state, v1::WORKER_STATE_SERVING);
  const auto now = WorkerRegistry::Clock::now();
  EXPECT_TRUE(reg.IsAlive(all[0], now));
  EXPECT_FALSE(reg.IsAlive(all[0], now + std::chrono::seconds(2)));
  EXPECT_EQ(reg.Alive().size(), 2u);
  EXPECT_TRUE(reg.Find("b").has_value());
  EXPECT_FALSE(reg.Find("c").has_value());
}

TEST(WorkerRegistry, APreferredOrderListsItsWorkersFirstThenTheRestByRegistration) {
  WorkerRegistry reg(/*session=*/7);
  for (const char* id : {"c", "a", "d", "b"}) reg.Register(Req(id));
  auto ids = [&] {
    std::vector<std::string> out;
    for (const WorkerRecord& w : reg.All()) out.push_back(w.id);
    return out;
  };
  EXPECT_EQ(ids(), (std::vector<std::string>{"c", "a", "d", "b"}));  // registration order
  // The previous leader's plan named b then a (and a worker that is not here).
  reg.SetPreferredOrder({"b", "gone", "a"});
  EXPECT_EQ(ids(), (std::vector<std::string>{"b", "a", "c", "d"}));
  EXPECT_EQ(reg.Alive().front().id, "b");
}

}  // namespace
}  // namespace cascade
