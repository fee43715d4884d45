#include "coordinator/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "util/secret.h"

#include "absl/time/time.h"

namespace cascade {

v1::RegisterResponse WorkerRegistry::Register(const v1::RegisterRequest& req) {
  absl::MutexLock lock(&mu_);
  WorkerRecord& w = workers_[req.worker_id()];
  if (w.id.empty()) w.registered_order = next_order_++;
  ++w.generation;
  w.id = req.worker_id();
  w.node = req.node();
  w.address = req.listen_address();
  w.data_address = req.data_address();
  w.resources = req.resources();
  w.state = v1::WORKER_STATE_IDLE;
  w.error.clear();
  w.last_seen = Clock::now();
  w.session_secret = RandomSecret();
  v1::RegisterResponse resp;
  resp.set_session_secret(w.session_secret);
  resp.set_worker_id(w.id);
  resp.set_session(session_);
  resp.set_heartbeat_interval_s(interval_);
  return resp;
}

absl::StatusOr<bool> WorkerRegistry::Heartbeat(const v1::HeartbeatRequest& req) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(req.worker_id());
  if (it == workers_.end() || req.session() != session_) return false;
  WorkerRecord& w = it->second;
  if (!SecretsEqual(req.session_secret(), w.session_secret)) {
    return absl::PermissionDeniedError(
        absl::StrCat("a heartbeat for worker ", w.id, " without its session secret"));
  }
  w.state = req.state();
  w.stats = req.stats();
  w.gpus.assign(req.gpus().begin(), req.gpus().end());
  w.process = req.process();
  w.error = req.error();
  w.last_seen = Clock::now();
  return true;
}

std::vector<WorkerRecord> WorkerRegistry::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerRecord> out;
  for (const auto& [id, w] : workers_) out.push_back(w);
  // (place in the preferred order, or after all of it; then registration order)
  auto key = [this](const WorkerRecord& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = preferred_.find(w.id);
    return std::make_pair(it == preferred_.end() ? preferred_.size() : it->second,
                          w.registered_order);
  };
  std::sort(out.begin(), out.end(),
            [&](const auto& a, const auto& b) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return key(a) < key(b);
            });
  return out;
}

void WorkerRegistry::SetPreferredOrder(std::vector<std::string> ids) {
  absl::MutexLock lock(&mu_);
  preferred_.clear();
  for (size_t i = 0; i < ids.size(); ++i) preferred_.emplace(ids[i], i);
}

std::optional<WorkerRecord> WorkerRegistry::Find(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) return std::nullopt;
  return it->second;
}

std::vector<WorkerRecord> WorkerRegistry::Alive() const {
  const auto now = Clock::now();
  std::vector<WorkerRecord> out;
  for (WorkerRecord& w : All()) {
    if (IsAlive(w, now)) out.push_back(std::move(w));
  }
  return out;
}

size_t WorkerRegistry::WaitForWorkers(size_t n, Clock::time_point deadline) {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return workers_.size() >= n; };
  mu_.AwaitWithDeadline(absl::Condition(&enough),
                        absl::FromChrono(std::chrono::system_clock::now() +
                                         (deadline - Clock::now())));
  return workers_.size();
}

}  // namespace cascade
