// ReplicaSet: the coordinator's pipelines. With --replicas 1 it is one ClusterController,
// as a coordinator always was (the workers beyond the plan are its spares). Otherwise it
// waits for the bring-up workers, asks the planner how they divide into pipelines
// (MakeReplicaPlans: `auto` makes as many as fit after the model's fewest stages), gives
// each replica its workers (those of its plan; spares to the replica with the fewest) and
// runs one ClusterController per replica over the one registry: each plans, loads,
// serves and re-plans by itself, so a replica that loses a worker is re-planned (from its
// spares, or over fewer stages) while the others serve on.
//
// Contract:
// - Thread-safe. The control plane (Register, Heartbeat) goes through one Registrar. A
//   worker stays in the replica it was given (a restarted worker returns to it); a worker
//   that registers after bring-up joins a replica that does not serve, else the one with
//   the fewest workers.
// - SchedulerFor(prompt) picks, among the replicas that serve, the one the Router's policy
//   (--routing; serving/router.h) names for the prompt. While none serves but one is
//   recovering from a lost worker, requests wait there; otherwise UNAVAILABLE with the
//   reason. An empty prompt asks only whether one serves (health): it takes no routing turn.
// - A replica that gives up its requests (no plan fits the workers it has left) hands
//   them, with what they streamed, to the least busy replica that serves
//   (Scheduler::HandOver): their streams go on with the same text. With none serving they
//   end UNAVAILABLE, as with one pipeline.
// - The set's state is the best of its replicas' (serving when any serves); before the
//   replicas exist it waits for workers, and stops when they do not come in time.
#ifndef CASCADE_COORDINATOR_REPLICA_SET_H_
#define CASCADE_COORDINATOR_REPLICA_SET_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/cluster_controller.h"
#include "coordinator/registrar.h"
#include "coordinator/registry.h"
#include "serving/router.h"

namespace cascade {

struct ReplicaSetSnapshot {
  ClusterState state = ClusterState::kWaitingForWorkers;
  std::string reason;                     // why not serving; "" while serving
  std::vector<ClusterSnapshot> replicas;  // each with its own workers
  std::vector<WorkerRecord> workers;      // every registered worker
  std::vector<bool> alive;                // per entry of `workers`
  double uptime_s = 0;
};

class ReplicaSet {
 public:
  // As ClusterController's: `model`, `workers` and `results` must outlive the set.
  ReplicaSet(const ClusterConfig& config, const ServedModel& model, WorkerClient* workers,
             SenderFactory make_sender, ResultRouter* results, std::string join_token = "");
  ~ReplicaSet();

  void Start(std::string results_address) ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  // Every replica stops at once, leaving the stages loaded (ClusterController::Abandon).
  void Abandon(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Every replica drains at once (ClusterController::Drain).
  void Drain(std::chrono::milliseconds timeout) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& req,
                                                const std::string& presented_token)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<bool> Heartbeat(const v1::HeartbeatRequest& req);
  bool MayQuery(const std::string& presented) const;
  const std::string& coordinator_secret() const;
  Registrar& registrar() { return registrar_; }
  // The order the planner lists workers in (WorkerRegistry::SetPreferredOrder): a new
  // leader's hint from the previous leader's plan. Before Start().
  void PreferWorkerOrder(std::vector<std::string> ids) { registry_.SetPreferredOrder(std::move(ids)); }

  absl::StatusOr<std::shared_ptr<Scheduler>> SchedulerFor(std::span<const int32_t> prompt) const
      ABSL_LOCKS_EXCLUDED(mu_);
  ClusterState state() const ABSL_LOCKS_EXCLUDED(mu_);
  bool WaitForState(std::initializer_list<ClusterState> states, std::chrono::milliseconds timeout)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Called after every change of the set's state (on a controller's thread).
  void OnStateChange(std::function<void(ClusterState)> fn) ABSL_LOCKS_EXCLUDED(mu_);
  ReplicaSetSnapshot Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);
  // Every replica's request metrics, summed.
  ServingMetrics::Snapshot ServingMetricsSnapshot() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  // Several replicas: waits for the workers, divides them and starts the controllers.
  void BringUp(std::string results_address) ABSL_LOCKS_EXCLUDED(mu_);
  // Which replica each worker is given: MakeReplicaPlans' division, spares to the
  // smallest; `count` replicas when the planner cannot divide them.
  std::vector<int> Divide(const std::vector<WorkerRecord>& workers, int* count) const;
  void StartReplicas(int count, const std::string& results_address) ABSL_LOCKS_EXCLUDED(mu_);
  bool IsMember(int replica, const std::string& id) const ABSL_LOCKS_EXCLUDED(mu_);
  // The controllers, copied under the lock: they are called without it (they call back
  // into the set, IsMember and HandOff, under locks of their own).
  std::vector<ClusterController*> Replicas() const ABSL_LOCKS_EXCLUDED(mu_);
  bool HandOff(int from, const std::shared_ptr<Scheduler>& scheduler) ABSL_LOCKS_EXCLUDED(mu_);
  // The set's state from its replicas'; tells the listeners when it changed.
  void Recompute() ABSL_LOCKS_EXCLUDED(mu_);
  void SetState(ClusterState s, std::string reason) ABSL_LOCKS_EXCLUDED(mu_);
  bool Stopping() const ABSL_LOCKS_EXCLUDED(mu_);

  const ClusterConfig config_;
  const ServedModel& model_;
  WorkerClient* const workers_;
  const SenderFactory make_sender_;
  ResultRouter* const results_;
  const bool several_;  // --replicas other than 1
  WorkerRegistry registry_;  // several replicas': the one registry
  Registrar registrar_;
  const Clock::time_point started_ = Clock::now();
  mutable Router router_;
  std::thread bring_up_;

  mutable absl::Mutex mu_;
  // Created once (one replica: in the constructor; several: at bring-up), then fixed.
  std::vector<std::unique_ptr<ClusterController>> replicas_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> replica_of_ ABSL_GUARDED_BY(mu_);  // worker id -> replica
  ClusterState state_ ABSL_GUARDED_BY(mu_) = ClusterState::kWaitingForWorkers;
  std::string reason_ ABSL_GUARDED_BY(mu_) = "starting";
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::function<void(ClusterState)>> listeners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_REPLICA_SET_H_
