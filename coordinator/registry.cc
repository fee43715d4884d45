#include "coordinator/registry.h"

#include <algorithm>

namespace cascade {

v1::RegisterResponse WorkerRegistry::Register(const v1::RegisterRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  WorkerRecord& w = workers_[req.worker_id()];
  if (w.id.empty()) w.registered_order = next_order_++;
  w.id = req.worker_id();
  w.node = req.node();
  w.address = req.listen_address();
  w.data_address = req.data_address();
  w.resources = req.resources();
  w.state = v1::WORKER_STATE_IDLE;
  w.last_seen = std::chrono::steady_clock::now();
  cv_.notify_all();
  v1::RegisterResponse resp;
  resp.set_worker_id(w.id);
  resp.set_session(session_);
  resp.set_heartbeat_interval_s(interval_);
  return resp;
}

bool WorkerRegistry::Heartbeat(const v1::HeartbeatRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(req.worker_id());
  if (it == workers_.end() || req.session() != session_) return false;
  WorkerRecord& w = it->second;
  w.state = req.state();
  w.stats = req.stats();
  w.error = req.error();
  w.last_seen = std::chrono::steady_clock::now();
  cv_.notify_all();
  return true;
}

std::vector<WorkerRecord> WorkerRegistry::All() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerRecord> out;
  for (const auto& [id, w] : workers_) out.push_back(w);
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.registered_order < b.registered_order; });
  return out;
}

std::vector<WorkerRecord> WorkerRegistry::Alive(std::chrono::milliseconds timeout) const {
  const auto now = std::chrono::steady_clock::now();
  std::vector<WorkerRecord> out;
  for (WorkerRecord& w : All()) {
    if (now - w.last_seen <= timeout) out.push_back(std::move(w));
  }
  return out;
}

size_t WorkerRegistry::WaitForWorkers(size_t n, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return workers_.size() >= n; });
  return workers_.size();
}

}  // namespace cascade
