#include "coordinator/cluster_controller.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "transport/frame.h"
#include "util/logging.h"
#include "util/secret.h"
#include "util/status_macros.h"

namespace cascade {

WorkerSpec PlannerSpec(const WorkerRecord& w) {
  WorkerSpec s;
  s.id = w.id;
  s.address = w.address;
  s.data_address = w.data_address;
  s.node = w.node;
  s.node_id = w.resources.node_id();
  s.node_memory = w.resources.node_memory();
  s.memory_bytes = w.resources.memory_bytes();
  s.gflops = w.resources.gflops() > 0 ? w.resources.gflops() : 1.0;
  s.tp = std::max(1, w.resources.tensor_parallel());
  s.generation = w.generation;
  return s;
}

const char* ClusterStateName(ClusterState s) {
  switch (s) {
    case ClusterState::kWaitingForWorkers:
      return "waiting for workers";
    case ClusterState::kPlanning:
      return "planning";
    case ClusterState::kLoading:
      return "loading";
    case ClusterState::kServing:
      return "serving";
    case ClusterState::kDegraded:
      return "degraded";
    case ClusterState::kReplanning:
      return "re-planning";
    case ClusterState::kDraining:
      return "draining";
    case ClusterState::kStopped:
      return "stopped";
  }
  return "?";
}

ClusterController::ClusterController(const ClusterConfig& config, const ServedModel& model,
                                     WorkerClient* workers, SenderFactory make_sender,
                                     ResultRouter* results, ReplicaOptions replica)
    : config_(config),
      model_(model),
      workers_(workers),
      make_sender_(std::move(make_sender)),
      results_(results),
      registry_(*replica.registry),
      replica_(std::move(replica)),
      log_prefix_(replica_.member ? absl::StrCat("replica ", replica_.index, ": ") : "cluster: "),
      scheduler_(std::make_shared<Scheduler>(config.scheduler, model.tokenizer(),
                                             model.config().context_length,
                                             model.config().vocab_size)) {
  if (config.scheduler.speculative == Speculative::kDraft && model.draft() != nullptr) {
    // Each replica drafts with a cache of its own over the shared draft weights.
    auto drafter = model.draft()->NewDrafter();
    if (drafter.ok()) {
      scheduler_->SetDrafter(std::move(*drafter));
    } else {
      spdlog::error("{}no draft model: {}", log_prefix_, drafter.status().message());
    }
  }
}

ClusterController::~ClusterController() { Shutdown(); }

void ClusterController::Start(std::string results_address) {
  PipelineLoaderOptions load;
  load.model_path = model_.path();
  load.results_address = std::move(results_address);
  load.data_plane = config_.data_plane.kind;
  load.stage = config_.stage;
  loader_ = std::make_unique<const PipelineLoader>(std::move(load), workers_, make_sender_);
  scheduler_->SetLinkErrorHandler([this](const absl::Status& st) {
    absl::MutexLock lock(&mu_);
    link_errors_.emplace_back(Clock::now(), std::string(st.message()));
  });
  scheduler_->Start();
  thread_ = std::thread([this] { Run(); });
}

void ClusterController::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  Unroute();
  scheduler_->Stop();
}

void ClusterController::Abandon(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    keep_stages_ = true;
  }
  scheduler_->StopAdmitting(why);
  scheduler_->FailAll(why);
  Shutdown();
}

void ClusterController::Drain(std::chrono::milliseconds timeout) {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    draining_ = true;
  }
  // No new requests, and health says NOT_SERVING at once; what runs goes on.
  scheduler_->StopAdmitting(absl::UnavailableError("the server is shutting down (draining)"));
  SetState(ClusterState::kDraining, "the server is shutting down (draining)");
  const auto deadline = Clock::now() + timeout;
  while (!scheduler_->Idle() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!scheduler_->Idle()) {
    spdlog::warn("drain: {} ms passed with requests still running; ending them", timeout.count());
    scheduler_->FailAll(absl::UnavailableError(absl::StrCat(
        "the server shut down before the request finished (drain timeout of ", timeout.count(),
        " ms)")));
  }
  Shutdown();
}

std::vector<WorkerRecord> ClusterController::AliveWorkers() const {
  std::vector<WorkerRecord> out = registry_.Alive();
  if (replica_.member) std::erase_if(out, [&](const WorkerRecord& w) { return !replica_.member(w.id); });
  return out;
}

std::vector<WorkerRecord> ClusterController::AllWorkers() const {
  std::vector<WorkerRecord> out = registry_.All();
  if (replica_.member) std::erase_if(out, [&](const WorkerRecord& w) { return !replica_.member(w.id); });
  return out;
}

std::optional<WorkerRecord> ClusterController::FindWorker(const std::string& id) const {
  if (replica_.member && !replica_.member(id)) return std::nullopt;
  return registry_.Find(id);
}

absl::StatusOr<std::shared_ptr<Scheduler>> ClusterController::scheduler() const {
  absl::MutexLock lock(&mu_);
  if (recovering_ && !draining_ && !stop_) return scheduler_;  // requests wait for the new plan
  switch (state_) {
    case ClusterState::kServing:
      return scheduler_;
    case ClusterState::kWaitingForWorkers:
    case ClusterState::kPlanning:
    case ClusterState::kLoading:
      return absl::UnavailableError(absl::StrCat("the model is loading: ", reason_));
    case ClusterState::kDraining:
      return absl::UnavailableError("the server is shutting down (draining)");
    case ClusterState::kDegraded:
    case ClusterState::kReplanning:
    case ClusterState::kStopped:
      return absl::UnavailableError(reason_);
  }
  return absl::UnavailableError(reason_);
}

ClusterState ClusterController::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

bool AwaitClusterState(absl::Mutex& mu, const ClusterState* state,
                       std::initializer_list<ClusterState> states,
                       std::chrono::milliseconds timeout) {
  std::vector<ClusterState> want(states);
  absl::MutexLock lock(&mu);
  auto reached = [&] { return std::find(want.begin(), want.end(), *state) != want.end(); };
  return mu.AwaitWithTimeout(absl::Condition(&reached), absl::FromChrono(timeout));
}

bool ClusterController::WaitForState(std::initializer_list<ClusterState> states,
                                     std::chrono::milliseconds timeout) {
  return AwaitClusterState(mu_, &state_, states, timeout);
}

void ClusterController::OnStateChange(std::function<void(ClusterState)> fn) {
  absl::MutexLock lock(&mu_);
  listeners_.push_back(std::move(fn));
}

ClusterSnapshot ClusterController::Snapshot() const {
  ClusterSnapshot s;
  {
    absl::MutexLock lock(&mu_);
    s.state = state_;
    s.reason = state_ == ClusterState::kServing ? "" : reason_;
    s.plan_id = plan_.plan_id;
    s.plan = plan_.plan;
    s.plan_workers = plan_.workers;
  }
  for (const StagePlan& sp : s.plan.stages) {
    s.stage_addresses.push_back(
        StageDataAddress(config_.data_plane.kind, s.plan_workers[sp.worker]));
  }
  s.uptime_s = std::chrono::duration<double>(Clock::now() - started_).count();
  s.workers = AllWorkers();
  const auto now = Clock::now();
  for (const WorkerRecord& w : s.workers) s.alive.push_back(registry_.IsAlive(w, now));
  s.scheduler = scheduler_->Stats();
  s.requests = scheduler_->metrics().Requests();
  return s;
}

void ClusterController::SetState(ClusterState s, std::string reason) {
  std::vector<std::function<void(ClusterState)>> listeners;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == s && reason_ == reason) return;
    state_ = s;
    reason_ = std::move(reason);
    listeners = listeners_;
    spdlog::info("{}{}{}{}", log_prefix_, ClusterStateName(s), reason_.empty() ? "" : ": ",
                 reason_);
  }
  for (const auto& fn : listeners) fn(s);
}

bool ClusterController::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

// Each phase returns the next one; kStopped means the machine makes no further transition
// by itself (bring-up failed, degraded, draining) and waits for Shutdown().
void ClusterController::Run() {
  ClusterState next = ClusterState::kWaitingForWorkers;
  while (next != ClusterState::kStopped) {
    if (Stopping()) break;
    switch (next) {
      case ClusterState::kWaitingForWorkers:
        next = WaitForWorkers();
        break;
      case ClusterState::kPlanning:
      case ClusterState::kReplanning:
        next = PlanPipeline();
        break;
      case ClusterState::kLoading:
        next = LoadPipeline();
        break;
      case ClusterState::kServing:
        next = Serve();
        break;
      case ClusterState::kDegraded:
        next = Degraded();
        break;
      case ClusterState::kDraining:
      case ClusterState::kStopped:
        next = ClusterState::kStopped;
        break;
    }
  }
  // Stopping (or failed): wait for the stop, then give the workers their memory back
  // (unless abandoned: a successor adopts them).
  bool keep = false;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&stop_));
    keep = keep_stages_;
  }
  if (!keep) UnloadPlan();
  if (state() != ClusterState::kStopped) SetState(ClusterState::kStopped, "the server is shutting down");
}

void ClusterController::Fail(const absl::Status& st) {
  spdlog::error("bring-up failed: {}", st.message());
  SetState(ClusterState::kStopped, absl::StrCat("the cluster failed to start: ", st.message()));
}

ClusterState ClusterController::WaitForWorkers() {
  const size_t want = static_cast<size_t>(config_.bring_up.workers);
  SetState(ClusterState::kWaitingForWorkers, absl::StrCat("waiting for ", want, " worker(s)"));
  const auto deadline = Clock::now() + std::chrono::seconds(config_.bring_up.worker_wait_s);
  while (AliveWorkers().size() < want) {
    if (Stopping()) return ClusterState::kStopped;
    if (Clock::now() > deadline) {
      Fail(absl::DeadlineExceededError(absl::StrCat("only ", AliveWorkers().size(), " of ",
                                                    want, " workers registered")));
      return ClusterState::kStopped;
    }
    const auto until = std::min(deadline, Clock::now() + std::chrono::milliseconds(100));
    if (replica_.member) {
      std::this_thread::sleep_until(until);  // the registry counts every replica's workers
    } else {
      registry_.WaitForWorkers(want, until);
    }
  }
  return ClusterState::kPlanning;
}

bool ClusterController::IsExcluded(const WorkerRecord& w) const {
  absl::MutexLock lock(&mu_);
  auto it = excluded_.find(w.id);
  if (it != excluded_.end() && it->second == w.generation) return true;
  auto failed = load_failed_.find(w.id);
  return failed != load_failed_.end() && failed->second == w.generation;
}

std::vector<WorkerRecord> ClusterController::EligibleWorkers() const {
  std::vector<WorkerRecord> out;
  for (WorkerRecord& w : AliveWorkers()) {
    if (IsExcluded(w) || w.state == v1::WORKER_STATE_FAILED ||
        w.state == v1::WORKER_STATE_DRAINING) {
      continue;
    }
    out.push_back(std::move(w));
  }
  return out;
}

ClusterController::WorkerSet ClusterController::Identities(
    const std::vector<WorkerRecord>& workers) {
  WorkerSet out;
  for (const WorkerRecord& w : workers) out.insert({w.id, w.generation});
  return out;
}

ClusterState ClusterController::PlanPipeline() {
  std::vector<std::string> lost;
  bool replanning;
  {
    absl::MutexLock lock(&mu_);
    replanning = brought_up_;
    lost = lost_;
  }
  SetState(replanning ? ClusterState::kReplanning : ClusterState::kPlanning,
           replanning ? "re-planning without the lost worker(s)" : "planning");
  {
    // The load failure bring-up retries after stays the news while its worker is left out.
    absl::MutexLock lock(&mu_);
    std::erase_if(load_failed_, [this](const auto& e) {
      std::optional<WorkerRecord> w = FindWorker(e.first);
      return !w || w->generation != e.second;  // registered anew: it may be planned again
    });
    if (load_failed_.empty()) bring_up_failure_.clear();
  }
  std::vector<WorkerSpec> specs;
  const std::vector<WorkerRecord> eligible = EligibleWorkers();
  planned_over_ = Identities(eligible);
  for (const WorkerRecord& w : eligible) specs.push_back(PlannerSpec(w));
  const PipelineTarget old = CurrentPlan();
  PlanLimits limits = config_.plan;
  limits.max_sequences = config_.scheduler.max_running;  // a KV cache it can use
  absl::StatusOr<Plan> plan =
      replanning ? Replan(model_.profile(), old.plan, old.workers, lost, specs, limits)
                 : MakePlan(model_.profile(), specs, limits);
  if (!plan.ok()) {
    std::string why = absl::StrCat(replanning ? "no plan fits the workers that remain: "
                                              : "no plan fits the workers: ",
                                   plan.status().message());
    // After a failed load, the plan without its worker: say what failed first.
    if (!bring_up_failure_.empty()) why = absl::StrCat(bring_up_failure_, "; then ", why);
    return AwaitWorkerChange(why, planned_over_);
  }
  spdlog::info("{}plan:\n{}", replica_.member ? log_prefix_ : "", plan->Table(model_.profile(), specs));
  absl::MutexLock lock(&mu_);
  plan_ = {RandomId(), *std::move(plan), std::move(specs)};
  return ClusterState::kLoading;
}

// A plan or load failed: the requests that wait for a plan end now, saying why, and the
// cluster waits (degraded) for the workers to change, then plans again after the backoff.
ClusterState ClusterController::AwaitWorkerChange(const std::string& why,
                                                  const WorkerSet& considered) {
  const auto earliest = Clock::now() + retry_backoff_;
  const std::string reason =
      absl::StrCat(why, "; waiting for the workers to change (one joins, re-registers or "
                   "leaves), then planning again (no sooner than ",
                   absl::FormatDuration(absl::FromChrono(retry_backoff_)), " from now)");
  retry_backoff_ = std::min(retry_backoff_ * 2, kMaxRetryBackoff);
  spdlog::error("{}", reason);
  bool brought_up;
  {
    absl::MutexLock lock(&mu_);
    recovering_ = false;
    brought_up = brought_up_;
  }
  SetState(ClusterState::kDegraded, reason);
  // Another replica that serves takes the requests up; without one they end, saying why.
  if (!replica_.hand_off || !replica_.hand_off(scheduler_)) {
    scheduler_->FailAll(absl::UnavailableError(reason));
  }
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || draining_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::Milliseconds(100))) {
        return ClusterState::kStopped;
      }
    }
    TendSpares();
    if (Clock::now() < earliest || Identities(EligibleWorkers()) == considered) continue;
    absl::MutexLock lock(&mu_);
    recovering_ = brought_up;  // requests wait for the new plan only once the cluster served
    return brought_up ? ClusterState::kReplanning : ClusterState::kPlanning;
  }
}

PipelineTarget ClusterController::CurrentPlan() const {
  absl::MutexLock lock(&mu_);
  return plan_;
}

bool ClusterController::BroughtUp() const {
  absl::MutexLock lock(&mu_);
  return brought_up_;
}

ClusterState ClusterController::LoadPipeline() {
  const PipelineTarget target = CurrentPlan();
  SetState(ClusterState::kLoading,
           absl::StrCat("loading ", target.plan.stages.size(), " stage(s)"));
  std::vector<WorkerRecord> stage_workers;
  for (const StagePlan& sp : target.plan.stages) {
    const std::string& id = target.workers[sp.worker].id;
    std::optional<WorkerRecord> w = FindWorker(id);
    if (!w) return AwaitWorkerChange(absl::StrCat("worker ", id, " is gone"), planned_over_);
    stage_workers.push_back(*std::move(w));
  }
  std::vector<std::string> failed_workers;
  absl::StatusOr<LoadedPipeline> pipeline = loader_->Load(target, stage_workers, &failed_workers);
  if (!pipeline.ok() && !failed_workers.empty() && BroughtUp()) {
    // After bring-up a worker that cannot load counts as lost: plan without it.
    spdlog::error("{}; planning without it", pipeline.status().message());
    absl::MutexLock lock(&mu_);
    for (const std::string& id : failed_workers) {
      if (auto w = FindWorker(id)) load_failed_[id] = w->generation;
      lost_.push_back(id);
    }
    return ClusterState::kReplanning;
  }
  if (!pipeline.ok()) return LoadFailed(pipeline.status(), failed_workers);
  if (Stopping()) return ClusterState::kStopped;
  if (absl::Status st = AttachPipeline(*std::move(pipeline)); !st.ok()) {
    Fail(st);
    return ClusterState::kStopped;
  }
  return ClusterState::kServing;
}

ClusterState ClusterController::LoadFailed(const absl::Status& why,
                                          const std::vector<std::string>& failed_workers) {
  UnloadPlan();  // the stages that did load
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& id : failed_workers) {
      if (auto w = FindWorker(id)) load_failed_[id] = w->generation;
    }
  }
  bring_up_failure_ = absl::StrCat(
      why.message(), failed_workers.empty()
                         ? ""
                         : absl::StrCat(" (", absl::StrJoin(failed_workers, ", "),
                                        " left out until re-registered)"));
  // Without the failed workers the eligible set differs at once: the next plan, without
  // them, comes after the backoff; with none failed (the first stage's link) it waits for
  // a change.
  return AwaitWorkerChange(bring_up_failure_, planned_over_);
}

absl::Status ClusterController::AttachPipeline(LoadedPipeline pipeline) {
  const uint64_t plan_id = pipeline.plan_id();
  // Routed before it is attached: the first results may follow the first frame at once.
  CASCADE_RETURN_IF_ERROR(results_->Add(
      plan_id, {pipeline.results_key(), model_.config().vocab_size, scheduler_}));
  {
    absl::MutexLock lock(&mu_);
    attached_plan_ = plan_id;
  }
  scheduler_->Attach(std::move(pipeline.spec));
  return absl::OkStatus();
}

void ClusterController::Unroute() {
  uint64_t plan_id;
  {
    absl::MutexLock lock(&mu_);
    plan_id = std::exchange(attached_plan_, 0);
  }
  if (plan_id != 0) results_->Remove(plan_id);
}

void ClusterController::DetachPipeline(const absl::Status& why) {
  Unroute();
  scheduler_->Detach(why);
}

std::vector<std::string> ClusterController::FindLostWorkers(std::string* problem) {
  const auto [plan_id, plan, specs] = CurrentPlan();
  const auto now = Clock::now();
  std::vector<std::string> lost;
  for (size_t i = 0; i < plan.stages.size(); ++i) {
    const WorkerSpec& spec = specs[plan.stages[i].worker];
    std::optional<WorkerRecord> w = FindWorker(spec.id);
    std::string why;
    if (!w) {
      why = absl::StrCat("stage ", i, " (worker ", spec.id, ") is no longer registered");
    } else if (spec.generation != 0 && w->generation != spec.generation) {
      // Restarted within the liveness timeout: alive, but its stage is gone.
      why = absl::StrCat("stage ", i, " (worker ", w->id, " at ", w->address,
                         ") restarted and lost its stage");
    } else if (!registry_.IsAlive(*w, now)) {
      why = absl::StrCat("stage ", i, " (worker ", w->id, " at ", w->address,
                         ") stopped responding");
    } else if (w->state == v1::WORKER_STATE_FAILED) {
      why = absl::StrCat("stage ", i, " (worker ", w->id, ") failed: ", w->error);
    } else if (w->state == v1::WORKER_STATE_DRAINING) {
      why = absl::StrCat("stage ", i, " (worker ", w->id, ") is draining");
    }
    if (why.empty()) continue;
    if (lost.empty()) *problem = why;
    lost.push_back(spec.id);
  }
  return lost;
}

std::string ClusterController::CheckFirstStageLink(std::string* problem) {
  std::vector<std::pair<Clock::time_point, std::string>> errors;
  {
    absl::MutexLock lock(&mu_);
    errors.swap(link_errors_);
  }
  if (errors.empty()) return "";
  const auto [plan_id, plan, specs] = CurrentPlan();
  if (plan.stages.empty()) return "";
  const WorkerSpec& spec = specs[plan.stages[0].worker];
  std::optional<WorkerRecord> w = FindWorker(spec.id);
  if (!w) return "";
  if (absl::Status st = workers_->Probe(*w); !st.ok()) {
    *problem = absl::StrCat("stage 0 (worker ", w->id, " at ", w->address,
                            ") cannot be reached: ", errors.back().second, "; ", st.message());
    return w->id;
  }
  // It answers, but frames cannot reach it: lost if that goes on for seconds.
  {
    absl::MutexLock lock(&mu_);
    link_errors_.insert(link_errors_.begin(), errors.begin(), errors.end());
    const auto horizon = Clock::now() - std::chrono::seconds(5);
    while (!link_errors_.empty() && link_errors_.front().first < horizon) {
      link_errors_.erase(link_errors_.begin());
    }
    if (link_errors_.empty() ||
        link_errors_.back().first - link_errors_.front().first < std::chrono::seconds(3)) {
      return "";
    }
    link_errors_.clear();
  }
  *problem = absl::StrCat("stage 0 (worker ", w->id, ") answers but its data plane at ",
                          spec.data_address, " does not: ", errors.back().second);
  return w->id;
}

void ClusterController::TendSpares() {
  const auto [plan_id, plan, specs] = CurrentPlan();
  std::set<std::string> in_plan;
  for (const StagePlan& st : plan.stages) in_plan.insert(specs[st.worker].id);
  for (const WorkerRecord& w : AliveWorkers()) {
    if (in_plan.count(w.id)) continue;
    if (w.state == v1::WORKER_STATE_IDLE) {
      absl::MutexLock lock(&mu_);
      auto ex = excluded_.find(w.id);
      if (ex != excluded_.end() && ex->second == w.generation) {
        spdlog::info("worker {} is back and idle: it serves as a spare", w.id);
        excluded_.erase(ex);
      }
      unloading_.erase(w.id);
      continue;
    }
    if (w.state == v1::WORKER_STATE_LOADING) continue;
    // It holds a stage of an old plan (it was stopped and came back): unload it, once.
    {
      absl::MutexLock lock(&mu_);
      auto it = unloading_.find(w.id);
      if (it != unloading_.end() && it->second == w.generation) continue;
      unloading_[w.id] = w.generation;
    }
    spdlog::info("worker {} holds a stage of an old plan; unloading it", w.id);
    if (absl::Status st = workers_->Unload(w, 0); !st.ok()) {
      spdlog::warn("unloading {}: {}", w.id, st.message());
    }
  }
}

ClusterState ClusterController::Serve() {
  size_t stages;
  {
    absl::MutexLock lock(&mu_);
    stages = plan_.plan.stages.size();
    brought_up_ = true;
    recovering_ = false;
    lost_.clear();
  }
  retry_backoff_ = kFirstRetryBackoff;
  bring_up_failure_.clear();
  SetState(ClusterState::kServing);
  spdlog::info("serving {} on {} stage(s)", model_.id(), stages);
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || draining_; };
      // Draining: the requests that run finish on this plan; Drain() stops us after.
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::Milliseconds(100))) {
        return ClusterState::kStopped;  // no further transition of ours
      }
    }
    TendSpares();
    std::string problem;
    std::vector<std::string> lost = FindLostWorkers(&problem);
    if (lost.empty()) {
      const std::string unreachable = CheckFirstStageLink(&problem);
      if (!unreachable.empty()) lost.push_back(unreachable);
    }
    if (lost.empty()) continue;
    spdlog::error("{}; re-planning", problem);
    {
      absl::MutexLock lock(&mu_);
      lost_ = lost;
      recovering_ = true;
      // Excluded in the registration it was lost in: the plan's, so that one that
      // restarted meanwhile (a new registration) may serve again at once as a spare.
      const PipelineTarget& target = plan_;
      for (const std::string& id : lost) {
        uint64_t generation = 0;
        for (const WorkerSpec& spec : target.workers) {
          if (spec.id == id) generation = spec.generation;
        }
        if (generation == 0) {
          if (auto w = FindWorker(id)) generation = w->generation;
        }
        excluded_[id] = generation;
      }
    }
    SetState(ClusterState::kDegraded, problem);
    return ClusterState::kDegraded;
  }
}

ClusterState ClusterController::Degraded() {
  std::string problem;
  {
    absl::MutexLock lock(&mu_);
    problem = reason_;
  }
  // The sequences wait, rewound, for the next plan: those that were on the lost stage are
  // not lost, they are prefilled again.
  DetachPipeline(absl::UnavailableError(problem));
  return ClusterState::kReplanning;
}

void ClusterController::UnloadPlan() {
  const auto [plan_id, plan, specs] = CurrentPlan();
  if (plan_id == 0) return;
  for (const StagePlan& sp : plan.stages) {
    std::optional<WorkerRecord> w = FindWorker(specs[sp.worker].id);
    if (!w || !registry_.IsAlive(*w, Clock::now())) continue;
    if (absl::Status st = workers_->Unload(*w, plan_id); !st.ok()) {
      spdlog::warn("unloading {}: {}", w->id, st.message());
    }
  }
}

}  // namespace cascade
