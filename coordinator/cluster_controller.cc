#include "coordinator/cluster_controller.h"

#include <future>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "transport/frame.h"
#include "util/logging.h"

namespace cascade {
namespace {

uint64_t NewId() {
  std::random_device rd;
  return ((uint64_t{rd()} << 32) ^ rd()) | 1;
}

}  // namespace

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
                                     WorkerClient* workers, SenderFactory make_sender)
    : config_(config),
      model_(model),
      workers_(workers),
      make_sender_(std::move(make_sender)),
      registry_(NewId(), config.bring_up.heartbeat_interval_s),
      scheduler_(std::make_shared<Scheduler>(config.scheduler, model.tokenizer(),
                                             model.config().context_length,
                                             model.config().vocab_size)) {}

ClusterController::~ClusterController() { Shutdown(); }

void ClusterController::Start(std::string results_address) {
  results_address_ = std::move(results_address);
  scheduler_->Start();
  thread_ = std::thread([this] { Run(); });
}

void ClusterController::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  scheduler_->Stop();
}

void ClusterController::Drain(std::chrono::milliseconds timeout) {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    draining_ = true;
  }
  // Health says NOT_SERVING at once; what runs goes on.
  SetState(ClusterState::kDraining, "the server is shutting down (draining)");
  scheduler_->StopAdmitting(absl::UnavailableError("the server is shutting down (draining)"));
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

absl::StatusOr<v1::RegisterResponse> ClusterController::Register(const v1::RegisterRequest& req) {
  if (req.worker_id().empty() || req.listen_address().empty()) {
    return absl::InvalidArgumentError("worker_id and listen_address are required");
  }
  if (req.protocol_version() != kFrameVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "protocol version ", req.protocol_version(), " is not supported (", kFrameVersion, ")"));
  }
  spdlog::info("worker {} registered from {} ({} cores, {} memory)", req.worker_id(),
               req.listen_address(), req.resources().cores(),
               HumanBytes(req.resources().memory_bytes()));
  return registry_.Register(req);
}

bool ClusterController::Heartbeat(const v1::HeartbeatRequest& req) {
  return registry_.Heartbeat(req);
}

void ClusterController::OnResult(const v1::StepResult& wire, const std::string& peer) {
  uint64_t plan_id;
  {
    absl::MutexLock lock(&mu_);
    plan_id = plan_id_;
  }
  auto r = DecodeResult(wire, plan_id, model_.config().vocab_size);
  if (!r.ok()) {
    spdlog::warn("result from {} rejected: {}", peer, r.status().message());
    if (wire.plan_id() != plan_id) return;  // another plan's: nothing of ours is lost
    StepResult failed;
    failed.plan_id = plan_id;
    failed.batch_id = wire.batch_id();
    failed.error = std::string(r.status().message());
    scheduler_->OnResult(std::move(failed));
    return;
  }
  scheduler_->OnResult(std::move(*r));
}

absl::StatusOr<std::shared_ptr<Scheduler>> ClusterController::scheduler() const {
  absl::MutexLock lock(&mu_);
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

bool ClusterController::WaitForState(std::initializer_list<ClusterState> states,
                                     std::chrono::milliseconds timeout) {
  std::vector<ClusterState> want(states);
  absl::MutexLock lock(&mu_);
  auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::find(want.begin(), want.end(), state_) != want.end();
  };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), absl::FromChrono(timeout));
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
    s.plan_id = plan_id_;
    s.plan = plan_;
    s.plan_workers = plan_workers_;
  }
  for (const StagePlan& sp : s.plan.stages) s.stage_addresses.push_back(DataAddress(s.plan_workers[sp.worker]));
  s.uptime_s = std::chrono::duration<double>(Clock::now() - started_).count();
  s.workers = registry_.All();
  const auto now = Clock::now();
  for (const WorkerRecord& w : s.workers) s.alive.push_back(registry_.IsAlive(w, now));
  s.scheduler = scheduler_->Stats();
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
    spdlog::info("cluster: {}{}{}", ClusterStateName(s), reason_.empty() ? "" : ": ", reason_);
  }
  for (const auto& fn : listeners) fn(s);
}

bool ClusterController::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

std::string ClusterController::DataAddress(const WorkerSpec& w) const {
  return config_.data_plane.kind == DataPlane::kTcp && !w.data_address.empty() ? w.data_address
                                                                               : w.address;
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
  // Stopping (or failed): wait for the stop, then give the workers their memory back.
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&stop_));
  }
  UnloadPlan();
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
  while (registry_.Alive().size() < want) {
    if (Stopping()) return ClusterState::kStopped;
    if (Clock::now() > deadline) {
      Fail(absl::DeadlineExceededError(absl::StrCat("only ", registry_.Alive().size(), " of ",
                                                    want, " workers registered")));
      return ClusterState::kStopped;
    }
    registry_.WaitForWorkers(want, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
  }
  return ClusterState::kPlanning;
}

ClusterState ClusterController::PlanPipeline() {
  SetState(ClusterState::kPlanning, "planning");
  std::vector<WorkerSpec> specs;
  for (const WorkerRecord& w : registry_.Alive()) {
    WorkerSpec s;
    s.id = w.id;
    s.address = w.address;
    s.data_address = w.data_address;
    s.node = w.node;
    s.memory_bytes = w.resources.memory_bytes();
    s.gflops = w.resources.gflops() > 0 ? w.resources.gflops() : 1.0;
    specs.push_back(s);
  }
  auto plan = MakePlan(model_.profile(), specs, config_.plan);
  if (!plan.ok()) {
    Fail(plan.status());
    return ClusterState::kStopped;
  }
  spdlog::info("plan:\n{}", plan->Table(model_.profile(), specs));
  absl::MutexLock lock(&mu_);
  plan_ = *plan;
  plan_workers_ = std::move(specs);
  plan_id_ = NewId();
  return ClusterState::kLoading;
}

ClusterController::PlanCopy ClusterController::CurrentPlan() const {
  absl::MutexLock lock(&mu_);
  return {plan_, plan_workers_, plan_id_};
}

ClusterState ClusterController::LoadPipeline() {
  const auto [plan, specs, plan_id] = CurrentPlan();
  const int S = static_cast<int>(plan.stages.size());
  SetState(ClusterState::kLoading, absl::StrCat("loading ", S, " stage(s)"));
  // Every stage loads at once; each worker pages in only its own layers.
  std::vector<std::future<absl::Status>> loads;
  for (int i = 0; i < S; ++i) {
    const StagePlan& sp = plan.stages[i];
    v1::LoadStageRequest req;
    req.set_plan_id(plan_id);
    req.set_model_path(model_.path());
    req.set_stage_index(i);
    req.set_num_stages(S);
    req.set_first_layer(sp.layers.first);
    req.set_last_layer(sp.layers.last);
    req.set_kv_blocks(plan.kv_blocks);
    req.set_kv_block_size(plan.kv_block_size);
    req.set_max_batch_tokens(static_cast<int32_t>(plan.batch_tokens));
    if (i + 1 < S) req.set_next_address(DataAddress(specs[plan.stages[i + 1].worker]));
    req.set_coordinator_address(results_address_);
    req.set_threads(config_.stage.threads);
    if (config_.stage.device) req.set_device(DeviceName(*config_.stage.device));
    req.set_exact(!config_.stage.quantized_activations);
    std::optional<WorkerRecord> w = registry_.Find(specs[sp.worker].id);
    if (!w) {
      Fail(absl::UnavailableError(absl::StrCat("worker ", specs[sp.worker].id, " is gone")));
      return ClusterState::kStopped;
    }
    loads.push_back(std::async(std::launch::async, [this, req, w = *w, i]() {
      absl::Status st = workers_->LoadStage(w, req);
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat("loading stage ", i, " on ", w.id, ": ",
                                                    st.message()));
      }
      return st;
    }));
  }
  absl::Status failed;
  for (auto& f : loads) {
    absl::Status st = f.get();
    if (!st.ok() && failed.ok()) failed = st;
  }
  if (!failed.ok()) {
    Fail(failed);
    return ClusterState::kStopped;
  }
  if (Stopping()) return ClusterState::kStopped;
  auto sender = make_sender_(DataAddress(specs[plan.stages[0].worker]));
  if (!sender.ok()) {
    Fail(sender.status());
    return ClusterState::kStopped;
  }
  PipelineSpec pipeline;
  pipeline.plan_id = plan_id;
  pipeline.num_stages = S;
  pipeline.kv_blocks = plan.kv_blocks;
  pipeline.kv_block_size = plan.kv_block_size;
  pipeline.max_batch_tokens = plan.batch_tokens;
  pipeline.first_stage = std::shared_ptr<ActivationSender>(std::move(*sender));
  scheduler_->Attach(std::move(pipeline));
  return ClusterState::kServing;
}

std::string ClusterController::FindLostStage() {
  const auto [plan, specs, plan_id] = CurrentPlan();
  const auto now = Clock::now();
  for (size_t i = 0; i < plan.stages.size(); ++i) {
    const WorkerSpec& spec = specs[plan.stages[i].worker];
    std::optional<WorkerRecord> w = registry_.Find(spec.id);
    if (!w) return absl::StrCat("stage ", i, " (worker ", spec.id, ") is no longer registered");
    if (!registry_.IsAlive(*w, now)) {
      return absl::StrCat("stage ", i, " (worker ", w->id, " at ", w->address,
                          ") stopped responding");
    }
    if (w->state == v1::WORKER_STATE_FAILED) {
      return absl::StrCat("stage ", i, " (worker ", w->id, ") failed: ", w->error);
    }
  }
  return "";
}

ClusterState ClusterController::Serve() {
  SetState(ClusterState::kServing);
  spdlog::info("serving {} on {} stage(s)", model_.id(), [&] {
    absl::MutexLock lock(&mu_);
    return plan_.stages.size();
  }());
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || draining_; };
      // Draining: the requests that run finish on this plan; Drain() stops us after.
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::Milliseconds(100))) {
        return ClusterState::kStopped;  // no further transition of ours
      }
    }
    std::string problem = FindLostStage();
    if (problem.empty()) continue;
    spdlog::error("{}; the pipeline is down", problem);
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
  // Without a plan that leaves out the lost worker, the requests it carried cannot go on.
  scheduler_->Detach(absl::UnavailableError(problem));
  scheduler_->FailAll(absl::UnavailableError(absl::StrCat(problem, "; request aborted")));
  return ClusterState::kStopped;  // stays degraded: no further transition of ours
}

void ClusterController::UnloadPlan() {
  const auto [plan, specs, plan_id] = CurrentPlan();
  if (plan_id == 0) return;
  for (const StagePlan& sp : plan.stages) {
    std::optional<WorkerRecord> w = registry_.Find(specs[sp.worker].id);
    if (!w || !registry_.IsAlive(*w, Clock::now())) continue;
    if (absl::Status st = workers_->Unload(*w, plan_id); !st.ok()) {
      spdlog::warn("unloading {}: {}", w->id, st.message());
    }
  }
}

}  // namespace cascade
