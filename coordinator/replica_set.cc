#include "coordinator/replica_set.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "util/logging.h"
#include "util/secret.h"

namespace cascade {
namespace {

// How good a state is for clients: the set takes its best replica's.
int Rank(ClusterState s) {
  switch (s) {
    case ClusterState::kServing:
      return 0;
    case ClusterState::kDraining:
      return 1;
    case ClusterState::kReplanning:
      return 2;
    case ClusterState::kLoading:
      return 3;
    case ClusterState::kPlanning:
      return 4;
    case ClusterState::kDegraded:
      return 5;
    case ClusterState::kWaitingForWorkers:
      return 6;
    case ClusterState::kStopped:
      return 7;
  }
  return 8;
}

}  // namespace

ReplicaSet::ReplicaSet(const ClusterConfig& config, const ServedModel& model,
                       WorkerClient* workers, SenderFactory make_sender, ResultRouter* results,
                       std::string join_token)
    : config_(config),
      model_(model),
      workers_(workers),
      make_sender_(std::move(make_sender)),
      results_(results),
      several_(config.replicas.count != 1),
      registry_(RandomId(), config.bring_up.heartbeat_interval_s),
      registrar_(&registry_, std::move(join_token), RandomSecret()),
      router_(config.replicas.routing) {
  if (several_) return;
  // One pipeline: one controller over every worker, made now (workers may register before
  // Start), its spares the workers beyond its plan.
  ClusterController::ReplicaOptions one;
  one.registry = &registry_;
  absl::MutexLock lock(&mu_);
  replicas_.push_back(std::make_unique<ClusterController>(config_, model_, workers_, make_sender_,
                                                          results_, std::move(one)));
}

ReplicaSet::~ReplicaSet() { Shutdown(); }

void ReplicaSet::Start(std::string results_address) {
  if (!several_) {
    ClusterController* one;
    {
      absl::MutexLock lock(&mu_);
      one = replicas_.front().get();
    }
    one->OnStateChange([this](ClusterState) { Recompute(); });
    one->Start(std::move(results_address));
    return;
  }
  bring_up_ = std::thread([this, address = std::move(results_address)] { BringUp(address); });
}

bool ReplicaSet::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

void ReplicaSet::BringUp(std::string results_address) {
  const size_t want = static_cast<size_t>(config_.bring_up.workers);
  SetState(ClusterState::kWaitingForWorkers, absl::StrCat("waiting for ", want, " worker(s)"));
  const auto deadline = Clock::now() + std::chrono::seconds(config_.bring_up.worker_wait_s);
  while (registry_.Alive().size() < want) {
    if (Stopping()) return;
    if (Clock::now() > deadline) {
      const std::string why = absl::StrCat("only ", registry_.Alive().size(), " of ", want,
                                           " workers registered");
      spdlog::error("bring-up failed: {}", why);
      SetState(ClusterState::kStopped, absl::StrCat("the cluster failed to start: ", why));
      return;
    }
    registry_.WaitForWorkers(want, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
  }
  std::vector<WorkerRecord> workers;
  for (WorkerRecord& w : registry_.Alive()) {
    if (w.state != v1::WORKER_STATE_FAILED && w.state != v1::WORKER_STATE_DRAINING) {
      workers.push_back(std::move(w));
    }
  }
  int count = 0;
  const std::vector<int> given = Divide(workers, &count);
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    for (size_t i = 0; i < workers.size(); ++i) replica_of_[workers[i].id] = given[i];
  }
  StartReplicas(count, results_address);
}

std::vector<int> ReplicaSet::Divide(const std::vector<WorkerRecord>& workers, int* count) const {
  std::vector<WorkerSpec> specs;
  for (const WorkerRecord& w : workers) specs.push_back(PlannerSpec(w));
  PlanLimits limits = config_.plan;
  limits.max_sequences = config_.scheduler.max_running;
  std::vector<int> given(workers.size(), -1);
  absl::StatusOr<ReplicaPlans> plans =
      MakeReplicaPlans(model_.profile(), specs, limits, config_.replicas.count);
  if (!plans.ok()) {
    // The replicas report their own plans' failures; the workers are dealt out evenly.
    *count = std::max(1, config_.replicas.count);
    spdlog::error("replicas: {}; dealing the {} workers out to {} replica(s)",
                  plans.status().message(), workers.size(), *count);
    for (size_t i = 0; i < given.size(); ++i) given[i] = static_cast<int>(i) % *count;
    return given;
  }
  *count = static_cast<int>(plans->replicas.size());
  std::vector<int> size(plans->replicas.size(), 0);
  for (size_t r = 0; r < plans->replicas.size(); ++r) {
    for (const StagePlan& st : plans->replicas[r].stages) {
      given[st.worker] = static_cast<int>(r);
      ++size[r];
    }
  }
  for (int w : plans->spares) {
    const int r = static_cast<int>(std::min_element(size.begin(), size.end()) - size.begin());
    given[w] = r;
    ++size[r];
  }
  spdlog::info("replicas: {} over {} worker(s):\n{}", *count, workers.size(),
               plans->Table(model_.profile(), specs));
  return given;
}

void ReplicaSet::StartReplicas(int count, const std::string& results_address) {
  std::vector<ClusterController*> started;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    std::vector<int> members(count, 0);
    for (const auto& [id, r] : replica_of_) ++members[r];
    // Workers that registered while the set divided the others: to the smallest replicas.
    for (const WorkerRecord& w : registry_.All()) {
      if (replica_of_.contains(w.id)) continue;
      const int r = static_cast<int>(std::min_element(members.begin(), members.end()) -
                                     members.begin());
      replica_of_[w.id] = r;
      ++members[r];
    }
    for (int r = 0; r < count; ++r) {
      ClusterConfig c = config_;
      c.bring_up.workers = std::max(1, members[r]);
      c.plan.auto_kv_sequences = 1;  // as MakeReplicaPlans plans each replica
      ClusterController::ReplicaOptions o;
      o.registry = &registry_;
      o.index = r;
      if (count > 1) {  // one replica of several: its own workers; others take its requests
        o.member = [this, r](const std::string& id) { return IsMember(r, id); };
        o.hand_off = [this, r](const std::shared_ptr<Scheduler>& s) { return HandOff(r, s); };
      }
      replicas_.push_back(std::make_unique<ClusterController>(c, model_, workers_, make_sender_,
                                                              results_, std::move(o)));
      started.push_back(replicas_.back().get());
    }
  }
  for (ClusterController* c : started) {
    c->OnStateChange([this](ClusterState) { Recompute(); });
    c->Start(results_address);
  }
  Recompute();
}

bool ReplicaSet::IsMember(int replica, const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = replica_of_.find(id);
  return it != replica_of_.end() && it->second == replica;
}

void ReplicaSet::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (bring_up_.joinable()) bring_up_.join();
  const std::vector<ClusterController*> all = Replicas();
  for (ClusterController* c : all) c->Shutdown();
}

void ReplicaSet::Abandon(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (bring_up_.joinable()) bring_up_.join();
  const std::vector<ClusterController*> all = Replicas();
  for (ClusterController* c : all) c->Abandon(why);
}

void ReplicaSet::Drain(std::chrono::milliseconds timeout) {
  const std::vector<ClusterController*> all = Replicas();
  std::vector<std::thread> draining;
  for (ClusterController* c : all) draining.emplace_back([c, timeout] { c->Drain(timeout); });
  for (std::thread& t : draining) t.join();
  Shutdown();
}

absl::StatusOr<v1::RegisterResponse> ReplicaSet::Register(const v1::RegisterRequest& req,
                                                          const std::string& presented_token) {
  absl::StatusOr<v1::RegisterResponse> resp = registrar_.Register(req, presented_token);
  if (!resp.ok() || !several_) return resp;
  const std::vector<ClusterController*> all = Replicas();
  if (all.empty()) return resp;  // divided at bring-up
  // A newcomer goes where it is needed most: a replica that does not serve, else the
  // smallest.
  std::vector<bool> serving;
  for (ClusterController* c : all) serving.push_back(c->state() == ClusterState::kServing);
  absl::MutexLock lock(&mu_);
  if (replica_of_.contains(req.worker_id())) return resp;  // back to its replica
  std::vector<int> members(all.size(), 0);
  for (const auto& [id, r] : replica_of_) ++members[r];
  int best = 0;
  for (int r = 1; r < static_cast<int>(all.size()); ++r) {
    if (std::pair(serving[r], members[r]) < std::pair(serving[best], members[best])) best = r;
  }
  replica_of_[req.worker_id()] = best;
  spdlog::info("worker {} joins replica {}", req.worker_id(), best);
  return resp;
}

absl::StatusOr<bool> ReplicaSet::Heartbeat(const v1::HeartbeatRequest& req) {
  return registrar_.Heartbeat(req);
}

bool ReplicaSet::MayQuery(const std::string& presented) const {
  return registrar_.MayQuery(presented);
}

const std::string& ReplicaSet::coordinator_secret() const {
  return registrar_.coordinator_secret();
}

absl::StatusOr<std::shared_ptr<Scheduler>> ReplicaSet::SchedulerFor(
    std::span<const int32_t> prompt) const {
  const std::vector<ClusterController*> all = Replicas();
  std::string reason;
  {
    absl::MutexLock lock(&mu_);
    reason = reason_;
  }
  if (all.empty()) return absl::UnavailableError(absl::StrCat("the model is loading: ", reason));
  if (all.size() == 1) return all.front()->scheduler();
  std::vector<std::shared_ptr<Scheduler>> held(all.size());
  std::vector<Scheduler*> serving(all.size(), nullptr);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r]->state() != ClusterState::kServing) continue;
    absl::StatusOr<std::shared_ptr<Scheduler>> s = all[r]->scheduler();
    if (!s.ok()) continue;
    held[r] = *std::move(s);
    serving[r] = held[r].get();
  }
  // An empty prompt asks whether any serves (health, availability): no routing turn.
  const int chosen = prompt.empty() ? static_cast<int>(std::find_if(serving.begin(), serving.end(),
                                                                    [](Scheduler* s) { return s; }) -
                                                       serving.begin())
                                    : router_.Choose(prompt, serving);
  if (chosen >= 0 && chosen < static_cast<int>(all.size())) return held[chosen];
  // None serves: wait on one that recovers from a lost worker, else say why.
  absl::Status why = absl::UnavailableError(reason);
  for (ClusterController* c : all) {
    absl::StatusOr<std::shared_ptr<Scheduler>> s = c->scheduler();
    if (s.ok()) return s;
    if (why.message().empty()) why = s.status();
  }
  return absl::UnavailableError(absl::StrCat("no replica serves: ", why.message()));
}

bool ReplicaSet::HandOff(int from, const std::shared_ptr<Scheduler>& scheduler) {
  if (Stopping()) return false;
  const std::vector<ClusterController*> all = Replicas();
  std::shared_ptr<Scheduler> to;
  int64_t least = 0;
  int chosen = -1;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    if (r == from || all[r]->state() != ClusterState::kServing) continue;
    absl::StatusOr<std::shared_ptr<Scheduler>> s = all[r]->scheduler();
    if (!s.ok()) continue;
    const SchedulerStats st = (*s)->Stats();
    if (to == nullptr || st.running + st.waiting < least) {
      to = *s;
      least = st.running + st.waiting;
      chosen = r;
    }
  }
  if (to == nullptr) return false;
  spdlog::warn("replica {} cannot serve; its requests go on on replica {}", from, chosen);
  scheduler->HandOver(std::move(to));
  return true;
}

void ReplicaSet::Recompute() {
  const std::vector<ClusterController*> all = Replicas();
  if (all.empty()) return;
  ClusterState best = ClusterState::kStopped;
  std::string reason;
  for (size_t r = 0; r < all.size(); ++r) {
    const ClusterSnapshot s = all[r]->Snapshot();
    if (r > 0 && Rank(s.state) >= Rank(best)) continue;
    best = s.state;
    reason = all.size() == 1 ? s.reason : absl::StrCat("replica ", r, ": ", s.reason);
  }
  SetState(best, best == ClusterState::kServing ? "" : reason);
}

void ReplicaSet::SetState(ClusterState s, std::string reason) {
  std::vector<std::function<void(ClusterState)>> listeners;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == s && reason_ == reason) return;
    state_ = s;
    reason_ = std::move(reason);
    listeners = listeners_;
    // One replica logs its own states; a set of several (or one still forming) its own.
    if (several_ && replicas_.size() != 1) {
      spdlog::info("cluster: {}{}{}", ClusterStateName(s), reason_.empty() ? "" : ": ", reason_);
    }
  }
  for (const auto& fn : listeners) fn(s);
}

ClusterState ReplicaSet::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

bool ReplicaSet::WaitForState(std::initializer_list<ClusterState> states,
                              std::chrono::milliseconds timeout) {
  return AwaitClusterState(mu_, &state_, states, timeout);
}

void ReplicaSet::OnStateChange(std::function<void(ClusterState)> fn) {
  absl::MutexLock lock(&mu_);
  listeners_.push_back(std::move(fn));
}

std::vector<ClusterController*> ReplicaSet::Replicas() const {
  absl::MutexLock lock(&mu_);
  std::vector<ClusterController*> out;
  for (const auto& r : replicas_) out.push_back(r.get());
  return out;
}

ReplicaSetSnapshot ReplicaSet::Snapshot() const {
  const std::vector<ClusterController*> all = Replicas();
  ReplicaSetSnapshot out;
  {
    absl::MutexLock lock(&mu_);
    out.state = state_;
    out.reason = state_ == ClusterState::kServing ? "" : reason_;
  }
  for (ClusterController* c : all) out.replicas.push_back(c->Snapshot());
  out.workers = registry_.All();
  const auto now = Clock::now();
  for (const WorkerRecord& w : out.workers) out.alive.push_back(registry_.IsAlive(w, now));
  out.uptime_s = std::chrono::duration<double>(now - started_).count();
  return out;
}

ServingMetrics::Snapshot ReplicaSet::ServingMetricsSnapshot() const {
  const std::vector<ClusterController*> all = Replicas();
  ServingMetrics::Snapshot out = ServingMetrics().Take();  // empty, with the buckets
  for (ClusterController* c : all) out.Add(c->ServingMetricsSnapshot());
  return out;
}

}  // namespace cascade
