// ClusterController: the coordinator's control loop, an explicit state machine that owns
// the worker registry, the plan and the scheduler's lifecycle. The gRPC and HTTP services
// only translate requests into calls on it (and on the scheduler it hands out).
//
//   kWaitingForWorkers --enough workers--> kPlanning --plan--> kLoading --all loaded-->
//   kServing --a stage's worker lost--> kDegraded --> kReplanning --plan--> kLoading
//            --> kServing (the same requests, resumed)
//   kPlanning --no plan fits--> kDegraded, kLoading --a stage fails to load--> kDegraded
//            (bring-up waits: the reason names the failure; kPlanning again when the
//            workers change, after the backoff)
//   kLoading after bring-up --a stage fails to load--> kReplanning without its worker
//   kReplanning --no plan fits the workers left--> kDegraded (requests end UNAVAILABLE
//            naming why; planned again when the workers change)
//   kWaitingForWorkers --fewer than bring_up.workers in worker_wait_s--> kStopped
//   any state --Drain()--> kDraining --in-flight done or timed out--> kStopped
//   any state --Shutdown()--> kStopped (reason() says why)
//
// Contract:
// - Start() runs the loop on a thread of its own; Shutdown() stops it at once (running
//   requests end with UNAVAILABLE) and Drain() first lets what runs finish; both join it
//   and unload the stages of the plan. Thread-safe.
// - scheduler() hands the scheduler out while serving and while recovering from a lost
//   worker (requests then wait for the new plan); otherwise UNAVAILABLE with the reason
//   (loading, draining, or the failed plan or load the controller waits to retry).
// - A worker counts as lost when its heartbeats stop (WorkerRegistry::liveness_timeout),
//   it reports WORKER_STATE_FAILED or DRAINING, or a load on it fails after bring-up. The
//   controller then re-plans over the workers that remain and the spares (workers that
//   registered beyond the plan's need), moving only the lost stages when spares hold them
//   (the other stages keep their weights), and the scheduler resumes every sequence on
//   the new plan by prefilling its prompt and the tokens already streamed: the streams go
//   on with exactly the text an undisturbed run gives. A lost worker takes no part in a
//   plan again until it registers anew (a restart) or, back from a stop, has unloaded.
// - A failed plan or load never stops the controller (only too few workers within
//   worker_wait_s does). It waits in kDegraded, its reason saying what failed and that it
//   waits, until the set of eligible workers (alive, not excluded) differs from the one the
//   failed attempt was made over: a worker joins, re-registers or leaves. It then plans
//   again, but no sooner than the retry backoff after the failure: kFirstRetryBackoff,
//   doubled by every failure in a row up to kMaxRetryBackoff, back to the first once a plan
//   serves. A worker whose load failed is excluded until it registers anew (a restarted or
//   corrected worker): the next plan is made without it, and its heartbeats alone (idle
//   again) do not bring it back.
// - What a plan becomes is the PipelineLoader's business (coordinator/pipeline_loader.h:
//   LoadStage requests, link keys, the first stage's link); the controller decides when to
//   load, attaches the pipeline it gets to the scheduler and routes the pipeline's results
//   (ResultRouter, coordinator/result_router.h) while it is attached: results reach the
//   scheduler through the router, never through the controller.
// - Every external effect goes through the injected WorkerClient and sender factory, so
//   the machine is tested with fakes and no network.
#ifndef CASCADE_COORDINATOR_CLUSTER_CONTROLLER_H_
#define CASCADE_COORDINATOR_CLUSTER_CONTROLLER_H_

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/control_plane.pb.h"
#include "cascade/v1/data_plane.pb.h"
#include "coordinator/cluster_config.h"
#include "coordinator/pipeline_loader.h"
#include "coordinator/planner.h"
#include "coordinator/registry.h"
#include "coordinator/result_router.h"
#include "serving/scheduler.h"
#include "coordinator/served_model.h"

namespace cascade {

enum class ClusterState {
  kWaitingForWorkers,
  kPlanning,
  kLoading,
  kServing,
  kDegraded,
  kReplanning,
  kDraining,
  kStopped,
};
const char* ClusterStateName(ClusterState s);

// Waits on `mu` (not held by the caller) until *state, which `mu` guards, is one of
// `states`; false on timeout. The controller's and the replica set's WaitForState.
bool AwaitClusterState(absl::Mutex& mu, const ClusterState* state,
                       std::initializer_list<ClusterState> states,
                       std::chrono::milliseconds timeout);

// What the planner knows of a registered worker.
WorkerSpec PlannerSpec(const WorkerRecord& w);

// A consistent view of the cluster for status reports.
struct ClusterSnapshot {
  ClusterState state = ClusterState::kWaitingForWorkers;
  std::string reason;  // why not serving; "" while serving
  uint64_t plan_id = 0;
  Plan plan;
  std::vector<WorkerSpec> plan_workers;  // indexed by StagePlan::worker
  std::vector<std::string> stage_addresses;  // where each stage's frames are sent
  std::vector<WorkerRecord> workers;     // every registered worker
  std::vector<bool> alive;               // per entry of `workers`
  SchedulerStats scheduler;
  // Requests that ended, by RequestOutcome: the scheduler's ServingMetrics counters, the
  // ones /metrics reports (so status and /metrics read the same numbers).
  std::array<uint64_t, kRequestOutcomes> requests{};
  double uptime_s = 0;
};

class ClusterController {
 public:
  // How long after a failed plan or load the controller waits at least before it plans
  // again (once the workers have changed); doubled by each failure in a row, up to the cap.
  static constexpr std::chrono::milliseconds kFirstRetryBackoff{500};
  static constexpr std::chrono::milliseconds kMaxRetryBackoff{30000};

  // The controller of one pipeline (coordinator/replica_set.h runs one per replica). It
  // plans over the workers of `replica.registry` (those `replica.member` names; every one
  // when it is null), which register (coordinator/registrar.h) before or after Start.
  // When it gives its requests up (no plan fits the workers left) it offers them to
  // `replica.hand_off` first (true: another replica took them; false, or none: they fail).
  // `model`, `workers`, `results` and the registry must outlive it; it adds
  // its pipeline to `results` while attached.
  struct ReplicaOptions {
    WorkerRegistry* registry = nullptr;
    std::function<bool(const std::string& worker_id)> member;
    std::function<bool(const std::shared_ptr<Scheduler>&)> hand_off;
    int index = 0;  // named in its log lines when a member of several
  };
  ClusterController(const ClusterConfig& config, const ServedModel& model, WorkerClient* workers,
                    SenderFactory make_sender, ResultRouter* results, ReplicaOptions replica);
  ~ClusterController();

  // `results_address` is where the last stage is told to send results.
  void Start(std::string results_address);
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops at once as Shutdown() does, its requests ending with `why`, but leaves the
  // workers' stages loaded: a coordinator that lost the leadership, whose successor adopts
  // the workers as they are (coordinator/leader_election.h).
  void Abandon(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops admitting, lets running requests finish for up to `timeout`, ends the rest with
  // UNAVAILABLE, then stops. Returns when stopped.
  void Drain(std::chrono::milliseconds timeout) ABSL_LOCKS_EXCLUDED(mu_);

  absl::StatusOr<std::shared_ptr<Scheduler>> scheduler() const ABSL_LOCKS_EXCLUDED(mu_);
  ClusterState state() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until the state is one of `states`; false on timeout.
  bool WaitForState(std::initializer_list<ClusterState> states, std::chrono::milliseconds timeout)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Called (on the controller's thread, without its lock) after every transition.
  void OnStateChange(std::function<void(ClusterState)> fn) ABSL_LOCKS_EXCLUDED(mu_);
  ClusterSnapshot Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);
  // The scheduler's request metrics (whatever the state; counted since start).
  ServingMetrics::Snapshot ServingMetricsSnapshot() const { return scheduler_->Metrics(); }

 private:
  using Clock = std::chrono::steady_clock;
  void Run();
  void SetState(ClusterState s, std::string reason = "") ABSL_LOCKS_EXCLUDED(mu_);
  bool Stopping() const ABSL_LOCKS_EXCLUDED(mu_);
  // Each returns the next state.
  ClusterState WaitForWorkers();
  ClusterState PlanPipeline();
  ClusterState LoadPipeline();
  ClusterState Serve();
  ClusterState Degraded();
  using WorkerSet = std::set<std::pair<std::string, uint64_t>>;  // (id, generation)
  // The workers a plan may use now: alive, not excluded, neither failed nor draining.
  std::vector<WorkerRecord> EligibleWorkers() const ABSL_LOCKS_EXCLUDED(mu_);
  static WorkerSet Identities(const std::vector<WorkerRecord>& workers);
  // A plan or load failed (`why`): requests waiting for a plan end saying so, and the
  // cluster waits (kDegraded) until the eligible workers differ from `considered` (those
  // the attempt was made over) and the retry backoff has passed; then it plans again.
  ClusterState AwaitWorkerChange(const std::string& why, const WorkerSet& considered);
  // A load failed that does not just move a served plan's stages elsewhere (bring-up, or
  // the first stage's link): the stages that loaded are unloaded, the workers whose load
  // failed excluded until they register anew, and the cluster waits (AwaitWorkerChange).
  ClusterState LoadFailed(const absl::Status& why,
                                 const std::vector<std::string>& failed_workers);
  void Fail(const absl::Status& st);
  // This controller's workers in the registry (all of them, unless a replica).
  std::vector<WorkerRecord> AliveWorkers() const;
  std::vector<WorkerRecord> AllWorkers() const;
  std::optional<WorkerRecord> FindWorker(const std::string& id) const;
  // The plan's lost workers (ids) and a description of the first; empty when all are well.
  std::vector<std::string> FindLostWorkers(std::string* problem) ABSL_LOCKS_EXCLUDED(mu_);
  // The first stage's worker, when sends to it fail and it does not answer a probe (a
  // killed process is found in milliseconds, not a heartbeat timeout), or its data plane
  // keeps failing while it answers.
  std::string CheckFirstStageLink(std::string* problem) ABSL_LOCKS_EXCLUDED(mu_);
  // Unloads stale stages from workers outside the plan and lets lost workers that came
  // back (and are idle) serve again as spares.
  void TendSpares() ABSL_LOCKS_EXCLUDED(mu_);
  bool IsExcluded(const WorkerRecord& w) const ABSL_LOCKS_EXCLUDED(mu_);
  void UnloadPlan() ABSL_LOCKS_EXCLUDED(mu_);
  // The current plan, its workers and its id, copied under the lock.
  PipelineTarget CurrentPlan() const ABSL_LOCKS_EXCLUDED(mu_);
  bool BroughtUp() const ABSL_LOCKS_EXCLUDED(mu_);
  // Routes the pipeline's results to the scheduler, then attaches it.
  absl::Status AttachPipeline(LoadedPipeline pipeline) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops routing the attached pipeline's results, then detaches it from the scheduler
  // (its sequences wait, rewound, for the next).
  void DetachPipeline(const absl::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops routing the attached pipeline's results (if any).
  void Unroute() ABSL_LOCKS_EXCLUDED(mu_);

  const ClusterConfig config_;
  const ServedModel& model_;
  WorkerClient* const workers_;
  const SenderFactory make_sender_;
  ResultRouter* const results_;
  WorkerRegistry& registry_;
  const ReplicaOptions replica_;
  const std::string log_prefix_;  // "cluster: " or "replica N: "
  std::unique_ptr<const PipelineLoader> loader_;  // made by Start, before the thread
  std::shared_ptr<Scheduler> scheduler_;  // created at start, lives as long as the controller
  const Clock::time_point started_ = Clock::now();
  std::thread thread_;

  mutable absl::Mutex mu_;
  ClusterState state_ ABSL_GUARDED_BY(mu_) = ClusterState::kWaitingForWorkers;
  std::string reason_ ABSL_GUARDED_BY(mu_) = "starting";
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool keep_stages_ ABSL_GUARDED_BY(mu_) = false;  // Abandon(): stop without unloading
  PipelineTarget plan_ ABSL_GUARDED_BY(mu_);  // the current plan (id 0: none yet)
  uint64_t attached_plan_ ABSL_GUARDED_BY(mu_) = 0;  // routed and attached now; 0: none
  std::vector<std::function<void(ClusterState)>> listeners_ ABSL_GUARDED_BY(mu_);
  bool brought_up_ ABSL_GUARDED_BY(mu_) = false;  // served once: failures now re-plan
  bool recovering_ ABSL_GUARDED_BY(mu_) = false;  // a plan is being replaced; requests wait
  std::vector<std::string> lost_ ABSL_GUARDED_BY(mu_);  // of the plan being replaced
  // Workers lost, by id, with the registration they were lost in.
  std::map<std::string, uint64_t> excluded_ ABSL_GUARDED_BY(mu_);
  // Failed sends to the first stage since the monitor last looked (scheduler thread).
  std::vector<std::pair<Clock::time_point, std::string>> link_errors_ ABSL_GUARDED_BY(mu_);
  // Workers outside the plan already told to unload, with their registration.
  std::map<std::string, uint64_t> unloading_ ABSL_GUARDED_BY(mu_);
  // Workers whose load failed, with the registration it failed in: excluded until they
  // register again (TendSpares does not bring them back).
  std::map<std::string, uint64_t> load_failed_ ABSL_GUARDED_BY(mu_);
  // The controller thread's own: the eligible workers the last plan was made over, the
  // backoff before the next retry, and the load failure that bring-up retries after.
  WorkerSet planned_over_;
  std::chrono::milliseconds retry_backoff_ = kFirstRetryBackoff;
  std::string bring_up_failure_;
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_CLUSTER_CONTROLLER_H_
