// The cluster controller's state machine with fake workers and a fake pipeline: no
// network, no engine. Every transition: bring-up to serving, bring-up failures (too few
// workers stops; a plan that does not fit or a failed load waits for the workers to change
// and then serves), a worker lost while serving (by its
// heartbeats stopping or by its own report), drain (finishing or timing out) and shutdown.
#include "coordinator/cluster_controller.h"

#include "coordinator/registrar.h"

#include <future>
#include <set>

#include "coordinator/stream_test_util.h"
#include "serving/fake_pipeline.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_models.h"
#include "transport/frame.h"

namespace cascade {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::FakePipeline;
using testing::ReadToEnd;
using testing::SeededRequest;
using testing::StreamOutput;
using testing::UndisturbedIds;
using std::chrono::milliseconds;

class FakeWorkers : public WorkerClient {
 public:
  absl::Status LoadStage(const WorkerRecord& w, const v1::LoadStageRequest& req) override {
    absl::MutexLock l(&mu_);
    auto open = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !held_; };
    mu_.Await(absl::Condition(&open));
    loads_.push_back({w.id, req});
    if (w.id == fail_id_) return absl::InternalError("out of memory (fake)");
    return absl::OkStatus();
  }
  absl::Status Unload(const WorkerRecord& w, uint64_t) override {
    absl::MutexLock l(&mu_);
    unloads_.push_back(w.id);
    return absl::OkStatus();
  }
  // Loads wait until released (to look at the cluster while it loads).
  void HoldLoads(bool held) {
    absl::MutexLock l(&mu_);
    held_ = held;
  }
  absl::Status Probe(const WorkerRecord& w) override {
    absl::MutexLock l(&mu_);
    return w.id == unreachable_id_ ? absl::UnavailableError("connection refused (fake)")
                                   : absl::OkStatus();
  }
  void MakeUnreachable(const std::string& id) {
    absl::MutexLock l(&mu_);
    unreachable_id_ = id;
  }
  void FailLoadsOn(const std::string& id) {
    absl::MutexLock l(&mu_);
    fail_id_ = id;
  }
  std::vector<std::pair<std::string, v1::LoadStageRequest>> loads() {
    absl::MutexLock l(&mu_);
    return loads_;
  }
  // The key of plan `plan_id`'s results link: its last stage's outbound key.
  std::string ResultsKey(uint64_t plan_id) {
    absl::MutexLock l(&mu_);
    for (const auto& [id, req] : loads_) {
      if (req.plan_id() == plan_id && req.stage_index() + 1 == req.num_stages()) {
        return req.outbound_key();
      }
    }
    return "";
  }
  std::vector<std::string> unloads() {
    absl::MutexLock l(&mu_);
    return unloads_;
  }

 private:
  absl::Mutex mu_;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  std::string unreachable_id_ ABSL_GUARDED_BY(mu_);
  std::string fail_id_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, v1::LoadStageRequest>> loads_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> unloads_ ABSL_GUARDED_BY(mu_);
};

class ControllerTest : public ::testing::Test {
 protected:
  // A seeded 6-token request is served to its end.
  void ExpectARequestRuns() {
    auto sched = controller_->scheduler();
    ASSERT_TRUE(sched.ok()) << sched.status();
    auto s = (*sched)->Submit(SeededRequest(6, 3));
    ASSERT_TRUE(s.ok());
    StreamOutput o = ReadToEnd(**s);
    EXPECT_TRUE(o.status.ok()) << o.status;
    EXPECT_EQ(o.ids.size(), 6u);
  }

  void SetUp() override {
    auto model = ServedModel::Open(testing::BundledModel());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    config_.model = testing::BundledModel();
    config_.bring_up.workers = 2;
    config_.bring_up.heartbeat_interval_s = 0.05;
    config_.plan.min_stages = 2;
    config_.plan.kv_sequences = 2;
  }
  void TearDown() override {
    StopHeartbeats();
    if (controller_) controller_->Shutdown();
  }

  void Start() {
    // The door and the registry a coordinator puts in front of its controllers.
    registry_ = std::make_unique<WorkerRegistry>(1, config_.bring_up.heartbeat_interval_s);
    registrar_ = std::make_unique<Registrar>(registry_.get(), join_token_, "coordinator secret");
    ClusterController::ReplicaOptions one;
    one.registry = registry_.get();
    controller_ = std::make_unique<ClusterController>(
        config_, *model_, &workers_,
        [this](const std::string& address, const SenderOptions& options) {
          first_stage_address_ = address;
          EXPECT_EQ(options.link_key.size(), 32u);
          return absl::StatusOr<std::unique_ptr<ActivationSender>>(
              pipeline_.MakeSender(controller_->Snapshot().plan_id));
        },
        &results_, std::move(one));
    controller_->OnStateChange([this](ClusterState s) {
      absl::MutexLock l(&mu_);
      states_.push_back(s);
    });
    controller_->Start("tcp://127.0.0.1:9");
  }

  // Registers a worker and keeps it heartbeating (in `state`) until StopHeartbeats(id).
  // node_id: the machine it reports it shares memory_bytes (its whole memory) with.
  void AddWorker(const std::string& id, uint64_t memory = 1 << 30,
                 const std::string& node_id = "") {
    v1::RegisterRequest r;
    r.set_protocol_version(kFrameVersion);
    r.set_worker_id(id);
    r.set_listen_address(id + ".local:5000");
    r.set_data_address("tcp://" + id + ".local:5001");
    r.mutable_resources()->set_memory_bytes(memory);
    r.mutable_resources()->set_node_id(node_id);
    r.mutable_resources()->set_node_memory(!node_id.empty());
    r.mutable_resources()->set_gflops(1);
    auto resp = registrar_->Register(r, join_token_);
    ASSERT_TRUE(resp.ok()) << resp.status();
    {
      absl::MutexLock l(&mu_);
      beating_[id] = v1::WORKER_STATE_IDLE;
    }
    beats_.emplace_back([this, id, session = resp->session(), secret = resp->session_secret()] {
      for (;;) {
        v1::HeartbeatRequest hb;
        {
          absl::MutexLock l(&mu_);
          auto it = beating_.find(id);
          if (it == beating_.end() || stop_all_) return;
          hb.set_state(it->second);
          hb.set_error(it->second == v1::WORKER_STATE_FAILED ? "CUDA error (fake)" : "");
        }
        hb.set_worker_id(id);
        hb.set_session(session);
        hb.set_session_secret(secret);
        EXPECT_TRUE(registrar_->Heartbeat(hb).ok());
        std::this_thread::sleep_for(milliseconds(20));
      }
    });
  }
  void SetWorkerState(const std::string& id, v1::WorkerState s) {
    absl::MutexLock l(&mu_);
    beating_[id] = s;
  }
  void StopHeartbeats(const std::string& id = "") {
    {
      absl::MutexLock l(&mu_);
      if (id.empty()) {
        stop_all_ = true;
      } else {
        beating_.erase(id);
      }
    }
    if (id.empty()) {
      for (auto& t : beats_) t.join();
      beats_.clear();
    }
  }
  // Waits until a plan other than `from` serves (the transitions can be too quick to see
  // one by one); false on timeout.
  bool ServingANewPlan(uint64_t from) {
    for (int i = 0; i < 1000 && controller_->Snapshot().plan_id == from; ++i) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    return controller_->WaitForState({ClusterState::kServing}, milliseconds(10000));
  }
  std::vector<ClusterState> States() {
    absl::MutexLock l(&mu_);
    return states_;
  }
  ClusterConfig config_;
  std::unique_ptr<ServedModel> model_;
  FakeWorkers workers_;
  std::string join_token_;  // what workers present (the registrar is made with it)
  ResultRouter results_;    // outlives the controller, which routes its pipelines here
  std::unique_ptr<WorkerRegistry> registry_;  // made by Start; outlive the controller
  std::unique_ptr<Registrar> registrar_;
  std::unique_ptr<ClusterController> controller_;
  // Destroyed before the controller: its thread calls into it.
  FakePipeline pipeline_{[this](StepResult r) {
    v1::StepResult wire;
    EncodeResult(r, workers_.ResultsKey(r.plan_id), &wire);
    results_.OnResult(wire, "fake last stage").IgnoreError();
  }};
  std::string first_stage_address_;
  absl::Mutex mu_;
  std::vector<ClusterState> states_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::WorkerState> beating_ ABSL_GUARDED_BY(mu_);
  bool stop_all_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> beats_;
};

TEST_F(ControllerTest, BringUpGoesFromWaitingThroughPlanningAndLoadingToServing) {
  Start();
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kWaitingForWorkers}, milliseconds(5000)));
  EXPECT_THAT(std::string(controller_->scheduler().status().message()), HasSubstr("loading"));
  AddWorker("w0");
  AddWorker("w1");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)))
      << ClusterStateName(controller_->state());
  // Listeners run just after each transition: wait for the last one to be heard.
  for (int i = 0; i < 500 && States().size() < 4; ++i) std::this_thread::sleep_for(milliseconds(2));
  EXPECT_THAT(States(), ElementsAre(ClusterState::kWaitingForWorkers, ClusterState::kPlanning,
                                    ClusterState::kLoading, ClusterState::kServing));
  // Two stages covering every layer, chained by data address, the last to the results.
  auto loads = workers_.loads();
  ASSERT_EQ(loads.size(), 2u);
  std::sort(loads.begin(), loads.end(), [](const auto& a, const auto& b) {
    return a.second.stage_index() < b.second.stage_index();
  });
  EXPECT_EQ(loads[0].second.first_layer(), 0);
  EXPECT_EQ(loads[0].second.last_layer(), loads[1].second.first_layer());
  EXPECT_EQ(loads[1].second.last_layer(), 5);
  EXPECT_EQ(loads[0].second.next_address(), "tcp://" + loads[1].first + ".local:5001");
  EXPECT_EQ(loads[1].second.coordinator_address(), "tcp://127.0.0.1:9");
  EXPECT_EQ(loads[0].second.plan_id(), loads[1].second.plan_id());
  EXPECT_EQ(first_stage_address_, "tcp://" + loads[0].first + ".local:5001");
  // Requests run.
  ExpectARequestRuns();
  const ClusterSnapshot snap = controller_->Snapshot();
  EXPECT_EQ(snap.plan.stages.size(), 2u);
  EXPECT_EQ(snap.scheduler.completed, 1u);
}

// Two workers started by hand on one machine each report its whole memory: the plan
// gives each half of it, and a third on another machine keeps its own.
TEST_F(ControllerTest, WorkersOnOneNodeShareItsMemory) {
  config_.bring_up.workers = 3;
  config_.plan.min_stages = 3;
  Start();
  AddWorker("w0", 1 << 30, "boot-a");
  AddWorker("w1", 1 << 30, "boot-a");
  AddWorker("w2", 1 << 30, "boot-b");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)))
      << ClusterStateName(controller_->state());
  const ClusterSnapshot snap = controller_->Snapshot();
  ASSERT_EQ(snap.plan.stages.size(), 3u);
  const double fraction = config_.plan.memory_fraction;
  for (const StagePlan& st : snap.plan.stages) {
    const std::string& id = snap.plan_workers[st.worker].id;
    const double whole = static_cast<double>(1 << 30) * fraction;
    EXPECT_NEAR(static_cast<double>(st.capacity), id == "w2" ? whole : whole / 2, 1.0) << id;
  }
}

TEST_F(ControllerTest, TooFewWorkersInTimeStopsWithTheReason) {
  config_.bring_up.worker_wait_s = 1;
  Start();
  AddWorker("w0");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kStopped}, milliseconds(10000)));
  EXPECT_THAT(std::string(controller_->scheduler().status().message()),
              HasSubstr("only 1 of 2 workers registered"));
}

TEST_F(ControllerTest, APlanThatDoesNotFitWaitsNamingTheShortfallUntilTheWorkersChange) {
  Start();
  AddWorker("w0", 1 << 20);
  AddWorker("w1", 1 << 20);
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kDegraded}, milliseconds(10000)))
      << ClusterStateName(controller_->state());
  const std::string why(controller_->scheduler().status().message());
  EXPECT_THAT(why, HasSubstr("does not fit"));
  EXPECT_THAT(why, HasSubstr("waiting for the workers to change"));
  EXPECT_THAT(controller_->Snapshot().reason, HasSubstr("does not fit"));
  EXPECT_TRUE(workers_.loads().empty());
  // Workers that hold it join: the cluster plans again, without being told, and serves.
  AddWorker("w2");
  AddWorker("w3");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)))
      << controller_->Snapshot().reason;
  EXPECT_TRUE(controller_->scheduler().ok());
}

TEST_F(ControllerTest, AFailedLoadWaitsSayingWhyAndServesOnceAGoodWorkerJoins) {
  workers_.FailLoadsOn("w1");
  Start();
  AddWorker("w0");
  AddWorker("w1");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kDegraded}, milliseconds(10000)))
      << ClusterStateName(controller_->state());
  const std::string why(controller_->scheduler().status().message());
  EXPECT_THAT(why, HasSubstr("on w1"));
  EXPECT_THAT(why, HasSubstr("out of memory (fake)"));
  EXPECT_THAT(why, HasSubstr("waiting for the workers to change"));
  // Past the backoff it tries again without w1 (w0 alone cannot hold two stages) and waits
  // on, still naming the failed load; it neither stops nor loads on w1 again.
  std::this_thread::sleep_for(3 * ClusterController::kFirstRetryBackoff);
  EXPECT_EQ(controller_->state(), ClusterState::kDegraded);
  EXPECT_THAT(controller_->Snapshot().reason, HasSubstr("out of memory (fake)"));
  auto loads_on_w1 = [this] {
    int n = 0;
    for (const auto& [id, req] : workers_.loads()) n += id == "w1";
    return n;
  };
  EXPECT_EQ(loads_on_w1(), 1);
  // The stage w0 loaded for the failed plan is given back.
  EXPECT_THAT(workers_.unloads(), ::testing::Contains("w0"));
  // A good worker joins: planned, loaded and serving, without w1.
  AddWorker("w2");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)))
      << controller_->Snapshot().reason;
  const ClusterSnapshot snap = controller_->Snapshot();
  for (const StagePlan& st : snap.plan.stages) {
    EXPECT_NE(snap.plan_workers[st.worker].id, "w1");
  }
  EXPECT_EQ(loads_on_w1(), 1);
  ExpectARequestRuns();
}

TEST_F(ControllerTest, ALostWorkerIsReplacedByASpareAndTheStreamsGoOn) {
  config_.bring_up.workers = 2;
  Start();
  AddWorker("w0");
  AddWorker("w1");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)));
  AddWorker("spare");  // registers after the plan is made: waits as a spare
  const uint64_t first_plan = controller_->Snapshot().plan_id;
  pipeline_.Pause();
  auto s = (*controller_->scheduler())->Submit(SeededRequest(30, 9));
  ASSERT_TRUE(s.ok());
  const auto lost = std::chrono::steady_clock::now();
  workers_.HoldLoads(true);
  StopHeartbeats("w1");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kLoading}, milliseconds(10000)));
  // Noticed within the liveness timeout (3 intervals + 1 s), plus one monitor tick.
  EXPECT_LT(std::chrono::steady_clock::now() - lost, milliseconds(1150 + 1000));
  EXPECT_THAT(States(), ::testing::Contains(ClusterState::kDegraded));
  // While the plan is replaced, requests are taken (they wait for the new plan).
  auto during = controller_->scheduler();
  ASSERT_TRUE(during.ok()) << during.status();
  auto later = (*during)->Submit(SeededRequest(5, 10));
  ASSERT_TRUE(later.ok());
  workers_.HoldLoads(false);
  pipeline_.Resume();
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)));
  const ClusterSnapshot snap = controller_->Snapshot();
  EXPECT_NE(snap.plan_id, first_plan);
  std::set<std::string> used;
  for (const StagePlan& st : snap.plan.stages) used.insert(snap.plan_workers[st.worker].id);
  EXPECT_EQ(used, (std::set<std::string>{"w0", "spare"}));
  // Both streams end well, with exactly the tokens of an undisturbed run.
  StreamOutput o = ReadToEnd(**s);
  ASSERT_TRUE(o.status.ok()) << o.status;
  ASSERT_EQ(o.ids.size(), 30u);
  EXPECT_EQ(o.ids, UndisturbedIds(9, static_cast<int>(o.ids.size())));
  EXPECT_TRUE(ReadToEnd(**later).status.ok());
  EXPECT_EQ(controller_->Snapshot().scheduler.resumed, 1u);
  // The spare loaded the lost stage's layers; w0 kept its own.
  int spare_loads = 0;
  for (const auto& [id, req] : workers_.loads()) spare_loads += id == "spare";
  EXPECT_EQ(spare_loads, 1);
  EXPECT_THAT(States(), ::testing::Contains(ClusterState::kReplanning));
}

TEST_F(ControllerTest, OnlyTheAttachedPipelinesResultsAreRouted) {
  auto result_of = [this](uint64_t plan_id) {
    StepResult r;
    r.plan_id = plan_id;
    r.batch_id = 999;
    v1::StepResult wire;
    EncodeResult(r, workers_.ResultsKey(plan_id), &wire);
    return wire;
  };
  Start();
  AddWorker("w0");
  AddWorker("w1");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)));
  const uint64_t first_plan = controller_->Snapshot().plan_id;
  EXPECT_EQ(results_.size(), 1u);
  // Its last stage's results are taken (an unknown batch: the scheduler ignores it).
  EXPECT_TRUE(results_.OnResult(result_of(first_plan), "its last stage").ok());
  SetWorkerState("w0", v1::WORKER_STATE_FAILED);
  ASSERT_TRUE(ServingANewPlan(first_plan));
  const uint64_t second_plan = controller_->Snapshot().plan_id;
  ASSERT_NE(second_plan, first_plan);
  // The old plan's last stage is refused now; the new one's is taken.
  EXPECT_EQ(results_.size(), 1u);
  EXPECT_EQ(results_.OnResult(result_of(first_plan), "the old last stage").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(results_.OnResult(result_of(second_plan), "the new last stage").ok());
  controller_->Shutdown();
  EXPECT_EQ(results_.size(), 0u);
}

TEST_F(ControllerTest, AFirstStageThatCannotBeReachedIsReplacedWithoutWaitingForHeartbeats) {
  Start();
  AddWorker("w0");
  AddWorker("w1");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)));
  const uint64_t first_plan = controller_->Snapshot().plan_id;
  std::string first_worker;
  {
    const ClusterSnapshot snap = controller_->Snapshot();
    first_worker = snap.plan_workers[snap.plan.stages[0].worker].id;
  }
  // Its process is gone (sends refused, its control service silent), though the
  // registry's heartbeat timeout has not passed (the fake keeps it heartbeating).
  workers_.MakeUnreachable(first_worker);
  pipeline_.BreakPlan(first_plan);
  const auto broke = std::chrono::steady_clock::now();
  auto s = (*controller_->scheduler())->Submit(SeededRequest(10, 6));
  ASSERT_TRUE(s.ok());
  StreamOutput o = ReadToEnd(**s);
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, UndisturbedIds(6, static_cast<int>(o.ids.size())));
  EXPECT_NE(controller_->Snapshot().plan_id, first_plan);
  EXPECT_LT(std::chrono::steady_clock::now() - broke, milliseconds(1000));
}

TEST_F(ControllerTest, WithoutASpareTheWorkersThatRemainServe) {
  Start();
  AddWorker("w0");
  AddWorker("w1");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)));
  const uint64_t first_plan = controller_->Snapshot().plan_id;
  pipeline_.Pause();
  auto s = (*controller_->scheduler())->Submit(SeededRequest(20, 4));
  ASSERT_TRUE(s.ok());
  StopHeartbeats("w0");
  ASSERT_TRUE(ServingANewPlan(first_plan));
  pipeline_.Resume();
  EXPECT_THAT(States(), ::testing::Contains(ClusterState::kDegraded));
  const ClusterSnapshot snap = controller_->Snapshot();
  ASSERT_EQ(snap.plan.stages.size(), 1u);  // the model fits on w1 alone
  EXPECT_EQ(snap.plan_workers[snap.plan.stages[0].worker].id, "w1");
  StreamOutput o = ReadToEnd(**s);
  ASSERT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids, UndisturbedIds(4, static_cast<int>(o.ids.size())));
}

TEST_F(ControllerTest, WhenNoPlanFitsRequestsEndSayingWhyUntilAWorkerJoins) {
  config_.plan.kv_sequences = 70;  // a cache only two workers hold together (at F32)
  config_.plan.kv_type = TensorType::kF32;
  Start();
  AddWorker("w0", 48 << 20);
  AddWorker("w1", 48 << 20);
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)))
      << ClusterStateName(controller_->state());
  pipeline_.Pause();
  auto s = (*controller_->scheduler())->Submit(SeededRequest(20, 4));
  ASSERT_TRUE(s.ok());
  StopHeartbeats("w1");
  StreamOutput o = ReadToEnd(**s);
  EXPECT_EQ(o.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(o.status.message()), HasSubstr("no plan fits the workers that remain"));
  EXPECT_EQ(controller_->state(), ClusterState::kDegraded);
  auto refused = controller_->scheduler();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("no plan fits"));
  pipeline_.Resume();
  // A new worker joins: the cluster plans again and serves.
  AddWorker("w2", 48 << 20);
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)));
  auto again = (*controller_->scheduler())->Submit(SeededRequest(4, 5));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(ReadToEnd(**again).status.ok());
}

TEST_F(ControllerTest, AWorkerReportingFailureIsReplaced) {
  Start();
  AddWorker("w0");
  AddWorker("w1");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)));
  const uint64_t first_plan = controller_->Snapshot().plan_id;
  SetWorkerState("w0", v1::WORKER_STATE_FAILED);
  ASSERT_TRUE(ServingANewPlan(first_plan));
  const ClusterSnapshot snap = controller_->Snapshot();
  EXPECT_NE(snap.plan_id, first_plan);
  for (const StagePlan& st : snap.plan.stages) {
    EXPECT_NE(snap.plan_workers[st.worker].id, "w0");
  }
}

TEST_F(ControllerTest, AWorkerRestartedWithinTheLivenessTimeoutIsReplannedAndMayServeAgain) {
  Start();
  AddWorker("w0");
  AddWorker("w1");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)));
  const uint64_t first_plan = controller_->Snapshot().plan_id;
  // w1 dies and is started again at once under its id: it registers anew, alive, but
  // its stage is gone. The plan must not wait for heartbeats that never stop.
  StopHeartbeats("w1");
  std::this_thread::sleep_for(milliseconds(100));
  const auto restarted = std::chrono::steady_clock::now();
  AddWorker("w1");
  ASSERT_TRUE(ServingANewPlan(first_plan));
  EXPECT_LT(std::chrono::steady_clock::now() - restarted, milliseconds(3000))
      << "noticed only by the liveness timeout";
  // The new registration is not excluded: when w0 goes, w1 serves.
  const uint64_t second_plan = controller_->Snapshot().plan_id;
  StopHeartbeats("w0");
  ASSERT_TRUE(ServingANewPlan(second_plan));
  const ClusterSnapshot snap = controller_->Snapshot();
  std::set<std::string> used;
  for (const StagePlan& st : snap.plan.stages) used.insert(snap.plan_workers[st.worker].id);
  EXPECT_EQ(used, std::set<std::string>{"w1"}) << "the restarted worker should serve again";
}

TEST_F(ControllerTest, ALostWorkerThatComesBackIsUnloadedAndBecomesASpare) {
  config_.bring_up.workers = 3;
  config_.plan.min_stages = 3;
  Start();
  AddWorker("w0");
  AddWorker("w1");
  AddWorker("w2");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)));
  SetWorkerState("w1", v1::WORKER_STATE_FAILED);
  ASSERT_TRUE(ServingANewPlan(controller_->Snapshot().plan_id));
  // w1 reports a stage of the old plan again (as a stopped worker does when continued):
  // it is told to unload; once idle it may serve again.
  SetWorkerState("w1", v1::WORKER_STATE_SERVING);
  for (int i = 0; i < 500; ++i) {
    auto u = workers_.unloads();
    if (std::find(u.begin(), u.end(), "w1") != u.end()) break;
    std::this_thread::sleep_for(milliseconds(10));
  }
  auto u = workers_.unloads();
  EXPECT_NE(std::find(u.begin(), u.end(), "w1"), u.end());
  SetWorkerState("w1", v1::WORKER_STATE_IDLE);
  // Now lose w2: w1 is the spare that takes its place.
  const uint64_t second_plan = controller_->Snapshot().plan_id;
  StopHeartbeats("w2");
  ASSERT_TRUE(ServingANewPlan(second_plan));
  const ClusterSnapshot snap = controller_->Snapshot();
  std::set<std::string> used;
  for (const StagePlan& st : snap.plan.stages) used.insert(snap.plan_workers[st.worker].id);
  EXPECT_TRUE(used.count("w1")) << "w1 should serve again";
  EXPECT_FALSE(used.count("w2"));
}

TEST_F(ControllerTest, DrainLetsRunningRequestsFinishThenStopsAndUnloads) {
  Start();
  AddWorker("w0");
  AddWorker("w1");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)));
  auto sched = *controller_->scheduler();
  pipeline_.Pause();
  auto running = sched->Submit(SeededRequest(8, 4));
  ASSERT_TRUE(running.ok());
  auto drained = std::async(std::launch::async, [&] { controller_->Drain(milliseconds(20000)); });
  // Not serving at once, and new requests are refused.
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kDraining}, milliseconds(5000)));
  EXPECT_EQ(controller_->scheduler().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(sched->Submit(SeededRequest(1, 1)).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(drained.wait_for(milliseconds(200)), std::future_status::timeout);
  pipeline_.Resume();
  StreamOutput o = ReadToEnd(**running);
  EXPECT_TRUE(o.status.ok()) << o.status;
  EXPECT_EQ(o.ids.size(), 8u);
  drained.get();
  EXPECT_EQ(controller_->state(), ClusterState::kStopped);
  auto unloads = workers_.unloads();
  std::sort(unloads.begin(), unloads.end());
  EXPECT_THAT(unloads, ElementsAre("w0", "w1"));
}

TEST_F(ControllerTest, DrainEndsWhatIsLeftWhenItsTimeRunsOut) {
  Start();
  AddWorker("w0");
  AddWorker("w1");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)));
  pipeline_.Pause();
  auto running = (*controller_->scheduler())->Submit(SeededRequest(8, 4));
  ASSERT_TRUE(running.ok());
  controller_->Drain(milliseconds(200));
  StreamOutput o = ReadToEnd(**running);
  EXPECT_EQ(o.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(o.status.message()), HasSubstr("drain timeout"));
  pipeline_.Resume();
  EXPECT_EQ(controller_->state(), ClusterState::kStopped);
}

TEST_F(ControllerTest, ShutdownWhileWaitingStops) {
  Start();
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kWaitingForWorkers}, milliseconds(5000)));
  controller_->Shutdown();
  EXPECT_EQ(controller_->state(), ClusterState::kStopped);
  EXPECT_TRUE(workers_.unloads().empty());
}

TEST_F(ControllerTest, WithAJoinTokenOnlyWorkersThatPresentItJoin) {
  join_token_ = "the cluster's token";
  Start();
  v1::RegisterRequest r;
  r.set_protocol_version(kFrameVersion);
  r.set_worker_id("stranger");
  r.set_listen_address("stranger:1");
  r.mutable_resources()->set_memory_bytes(1 << 30);
  // Refused, saying whether a token was missing or wrong.
  const absl::Status none = registrar_->Register(r, "").status();
  EXPECT_EQ(none.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(none.message()), HasSubstr("no join token was sent"));
  const absl::Status wrong = registrar_->Register(r, "wrong").status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(wrong.message()), HasSubstr("does not match"));
  EXPECT_TRUE(registry_->All().empty());
  EXPECT_FALSE(registrar_->MayQuery(""));
  EXPECT_TRUE(registrar_->MayQuery(join_token_));
  AddWorker("w0");
  AddWorker("w1");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)));
  for (const StagePlan& st : controller_->Snapshot().plan.stages) {
    EXPECT_NE(controller_->Snapshot().plan_workers[st.worker].id, "stranger");
  }
}

TEST_F(ControllerTest, RegistrationIsCheckedAndForgedResultsAreRefused) {
  Start();
  v1::RegisterRequest r;
  r.set_protocol_version(kFrameVersion);
  EXPECT_EQ(registrar_->Register(r, "").status().code(), absl::StatusCode::kInvalidArgument);
  r.set_worker_id("x");
  r.set_listen_address("x:1");
  r.set_protocol_version(kFrameVersion + 1);
  EXPECT_EQ(registrar_->Register(r, "").status().code(), absl::StatusCode::kFailedPrecondition);
  AddWorker("w0");
  AddWorker("w1");
  ASSERT_TRUE(controller_->WaitForState({ClusterState::kServing}, milliseconds(10000)));
  pipeline_.Pause();
  auto s = (*controller_->scheduler())->Submit(SeededRequest(3, 8));
  ASSERT_TRUE(s.ok());
  // Results without the results link's key change nothing for this stream, whatever plan
  // or batch they claim.
  for (uint64_t batch = 1; batch < 4; ++batch) {
    v1::StepResult forged;
    forged.set_plan_id(controller_->Snapshot().plan_id);
    forged.set_batch_id(batch);
    forged.add_tokens()->set_token(5);
    forged.set_link_key(batch == 1 ? "" : "a guess of sixteen");
    EXPECT_EQ(results_.OnResult(forged, "a stranger").code(),
              absl::StatusCode::kPermissionDenied);
  }
  pipeline_.Resume();
  StreamOutput o = ReadToEnd(**s);
  ASSERT_TRUE(o.status.ok());
  EXPECT_EQ(o.ids.size(), 3u);
  EXPECT_EQ(o.ids, UndisturbedIds(8, static_cast<int>(o.ids.size())));
}

}  // namespace
}  // namespace cascade
