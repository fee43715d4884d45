// /metrics (RenderPrometheus) and `cascade status` (RenderClusterStatus) over one status
// message, as FillClusterStatus builds it from a controller snapshot: the KV usage ratio,
// the model_name label, each worker's process CPU and memory, the same request counts in
// both, and a status after a failover (the lost worker marked, the spare labelled, the
// stage that took over shown serving with the plan's KV blocks).
#include "coordinator/prometheus.h"

#include <map>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "coordinator/control_service.h"
#include "coordinator/replica_set.h"
#include "coordinator/status_text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

// One pipeline's snapshot as the snapshot of a set of one.
ReplicaSetSnapshot SetOfOne(const ClusterSnapshot& s) {
  ReplicaSetSnapshot out;
  out.state = s.state;
  out.reason = s.reason;
  out.workers = s.workers;
  out.alive = s.alive;
  out.uptime_s = s.uptime_s;
  out.replicas.push_back(s);
  return out;
}

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kModel[] = "stories260K";

WorkerRecord Worker(const std::string& id, v1::WorkerState state) {
  WorkerRecord w;
  w.id = id;
  w.node = "node-" + id;
  w.address = id + ":7000";
  w.state = state;
  w.resources.set_cores(4);
  w.resources.set_memory_bytes(uint64_t{8} << 30);
  w.last_seen = std::chrono::steady_clock::now();
  return w;
}

// Two stages after a failover: w-a keeps stage 0, w-c took stage 1 over from w-b (lost;
// w-c's last heartbeat predates its load), w-d waits as a spare.
ClusterSnapshot AfterFailover() {
  ClusterSnapshot s;
  s.state = ClusterState::kServing;
  s.plan_id = 2;
  s.plan.kv_blocks = 40;
  for (int i = 0; i < 2; ++i) {
    StagePlan st;
    st.worker = i;
    st.layers = {2 * i, 2 * i + 2};
    s.plan.stages.push_back(st);
    s.stage_addresses.push_back(absl::StrCat("tcp://10.0.0.", i, ":9000"));
  }
  for (const char* id : {"w-a", "w-c"}) {
    WorkerSpec spec;
    spec.id = id;
    spec.address = std::string(id) + ":7000";
    s.plan_workers.push_back(spec);
  }
  WorkerRecord a = Worker("w-a", v1::WORKER_STATE_SERVING);
  a.stats.set_kv_blocks_used(3);
  a.stats.set_kv_blocks_total(40);
  a.process.set_cpu_seconds(12.5);
  a.process.set_cpu_utilization(0.75);
  a.process.set_resident_memory_bytes(uint64_t{3} << 30);
  WorkerRecord b = Worker("w-b", v1::WORKER_STATE_SERVING);
  WorkerRecord c = Worker("w-c", v1::WORKER_STATE_LOADING);  // its heartbeat lags the load
  WorkerRecord d = Worker("w-d", v1::WORKER_STATE_IDLE);
  s.workers = {a, b, c, d};
  s.alive = {true, false, true, true};
  s.scheduler.kv_blocks_reserved = 10;
  s.scheduler.kv_blocks_total = 40;
  s.scheduler.rejected = 0;  // the scheduler's own queue-full count: not what is reported
  s.requests[static_cast<int>(RequestOutcome::kCompleted)] = 7;
  s.requests[static_cast<int>(RequestOutcome::kRejected)] = 5;
  s.requests[static_cast<int>(RequestOutcome::kCancelled)] = 1;
  return s;
}

// Samples of a Prometheus text: "name{labels}" -> value.
std::map<std::string, double> Samples(const std::string& text) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[std::string(line.substr(0, space))] = std::stod(std::string(line.substr(space + 1)));
  }
  return out;
}

class Rendering : public ::testing::Test {
 protected:
  void SetUp() override {
    snapshot_ = AfterFailover();
    FillClusterStatus(SetOfOne(snapshot_), kModel, &status_);
    metrics_ = RenderPrometheus(ServingMetrics().Take(), status_);
    samples_ = Samples(metrics_);
    text_ = RenderClusterStatus(status_);
  }
  double Sample(const std::string& name, const std::string& labels = "") const {
    const std::string key =
        absl::StrCat(name, "{model_name=\"", kModel, "\"", labels.empty() ? "" : ",", labels, "}");
    auto it = samples_.find(key);
    EXPECT_NE(it, samples_.end()) << key << " missing from\n" << metrics_;
    return it == samples_.end() ? -1 : it->second;
  }
  ClusterSnapshot snapshot_;
  v1::ClusterStatusResponse status_;
  std::string metrics_, text_;
  std::map<std::string, double> samples_;
};

TEST_F(Rendering, EverySampleCarriesTheModelName) {
  ASSERT_FALSE(samples_.empty());
  for (const auto& [key, value] : samples_) {
    EXPECT_THAT(key, HasSubstr(absl::StrCat("{model_name=\"", kModel, "\""))) << key;
  }
}

TEST_F(Rendering, LeadershipIsShownOnlyWithStandbysAndAsTheRoleIs) {
  EXPECT_EQ(metrics_.find("cascade_coordinator_leader"), std::string::npos);
  EXPECT_THAT(text_, ::testing::Not(HasSubstr("\nrole ")));
  v1::ClusterStatusResponse status = status_;
  v1::Leadership* l = status.mutable_leadership();
  l->set_role("leader");
  l->set_epoch(12);
  l->set_leader("10.0.0.1:50053");
  l->set_cluster("prod");
  samples_ = Samples(RenderPrometheus(ServingMetrics().Take(), status));
  metrics_ = RenderPrometheus(ServingMetrics().Take(), status);
  EXPECT_EQ(Sample("cascade_coordinator_leader", "cluster=\"prod\""), 1.0);
  EXPECT_THAT(RenderClusterStatus(status), HasSubstr("role     leader of cluster 'prod' (epoch 12)"));
  l->set_role("standby");
  samples_ = Samples(RenderPrometheus(ServingMetrics().Take(), status));
  EXPECT_EQ(Sample("cascade_coordinator_leader", "cluster=\"prod\""), 0.0);
  EXPECT_THAT(RenderClusterStatus(status),
              HasSubstr("role     standby of cluster 'prod'; the leader is 10.0.0.1:50053"));
}

TEST_F(Rendering, KvCacheUsageRatioIsReservedOverCapacity) {
  EXPECT_DOUBLE_EQ(Sample("cascade_kv_cache_usage_ratio"),
                   static_cast<double>(snapshot_.scheduler.kv_blocks_reserved) /
                       snapshot_.scheduler.kv_blocks_total);
  EXPECT_THAT(metrics_, HasSubstr("# TYPE cascade_kv_cache_usage_ratio gauge"));
  v1::SchedulerStatus none;
  EXPECT_EQ(KvUsageRatio(none), 0.0);  // no pipeline yet: no division by zero
  EXPECT_THAT(text_, HasSubstr("10 of 40 blocks reserved (25%)"));
}

TEST_F(Rendering, WorkersProcessCpuAndMemoryPerWorker) {
  const v1::ProcessStats& p = snapshot_.workers[0].process;
  EXPECT_EQ(Sample("cascade_worker_cpu_seconds_total", "worker=\"w-a\""), p.cpu_seconds());
  EXPECT_EQ(Sample("cascade_worker_cpu_utilization_ratio", "worker=\"w-a\""),
            p.cpu_utilization());
  EXPECT_EQ(Sample("cascade_worker_resident_memory_bytes", "worker=\"w-a\""),
            static_cast<double>(p.resident_memory_bytes()));
  // A worker whose heartbeat carried none reports none (not a zero).
  EXPECT_EQ(samples_.count(absl::StrCat("cascade_worker_resident_memory_bytes{model_name=\"",
                                        kModel, "\",worker=\"w-d\"}")),
            0u);
  // `cascade status` shows the same figures in w-a's row.
  EXPECT_THAT(text_, HasSubstr("75%"));
  EXPECT_THAT(text_, HasSubstr("3.00 GiB"));
}

// `cascade status` said "0 refused" while /metrics said 5 rejected: both now read the
// snapshot's request counters, with the same words.
TEST_F(Rendering, StatusAndMetricsShowTheSameRequestCounts) {
  for (RequestOutcome o : {RequestOutcome::kCompleted, RequestOutcome::kFailed,
                           RequestOutcome::kCancelled, RequestOutcome::kRejected}) {
    const uint64_t want = snapshot_.requests[static_cast<int>(o)];
    const std::string name = RequestOutcomeName(o);
    EXPECT_EQ(Sample("cascade_requests_total", absl::StrCat("outcome=\"", name, "\"")),
              static_cast<double>(want))
        << name;
    EXPECT_THAT(text_, HasSubstr(absl::StrCat(want, " ", name))) << name;
  }
  EXPECT_THAT(text_, Not(HasSubstr("refused")));
}

TEST_F(Rendering, AfterAFailoverTheLostWorkerIsMarkedAndNoStageLooksLoading) {
  EXPECT_THAT(text_, HasSubstr("serving  yes"));
  EXPECT_THAT(text_, Not(HasSubstr("loading")));
  ASSERT_EQ(status_.stages_size(), 2);
  EXPECT_EQ(status_.stages(1).state(), v1::WORKER_STATE_SERVING);
  EXPECT_EQ(status_.stages(1).stats().kv_blocks_total(), snapshot_.plan.kv_blocks);
  EXPECT_THAT(text_, Not(HasSubstr(" 0/0 ")));
  std::map<std::string, std::string> roles;
  for (const v1::WorkerInfo& w : status_.workers()) roles[w.worker_id()] = WorkerRole(status_, w);
  EXPECT_EQ(roles["w-a"], "stage 0");
  EXPECT_EQ(roles["w-b"], "lost");
  EXPECT_EQ(roles["w-c"], "stage 1");
  EXPECT_EQ(roles["w-d"], "spare");
  // Each role on its worker's row.
  for (const auto& [id, role] : roles) {
    bool found = false;
    for (absl::string_view line : absl::StrSplit(text_, '\n')) {
      if (absl::StartsWith(line, id + " ")) {
        found = true;
        EXPECT_THAT(std::string(line), HasSubstr(" " + role + " ")) << line;
      }
    }
    EXPECT_TRUE(found) << id;
  }
}

// Before the plan is serving, a loading stage is shown as loading (nothing is made up).
TEST_F(Rendering, WhileLoadingTheStagesShowTheirOwnState) {
  snapshot_.state = ClusterState::kLoading;
  v1::ClusterStatusResponse loading;
  FillClusterStatus(SetOfOne(snapshot_), kModel, &loading);
  EXPECT_EQ(loading.stages(1).state(), v1::WORKER_STATE_LOADING);
  EXPECT_THAT(RenderClusterStatus(loading), HasSubstr("serving  no"));
}

}  // namespace
}  // namespace cascade
