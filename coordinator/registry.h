// WorkerRegistry: the workers the coordinator knows, fed by Register and Heartbeat.
//
// Contract: thread-safe. A worker is alive while its last heartbeat is younger than the
// timeout. Register assigns (or renews) a worker's entry; Heartbeat from an unknown worker
// returns false so that it registers again (e.g. after a coordinator restart).
#ifndef CASCADE_COORDINATOR_REGISTRY_H_
#define CASCADE_COORDINATOR_REGISTRY_H_

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "cascade/v1/worker.pb.h"

namespace cascade {

struct WorkerRecord {
  std::string id;
  std::string node;
  std::string address;
  std::string data_address;  // tcp://host:port, or empty (gRPC only)
  v1::WorkerResources resources;
  v1::WorkerState state = v1::WORKER_STATE_IDLE;
  v1::StageStats stats;
  std::string error;
  std::chrono::steady_clock::time_point last_seen;
  uint64_t registered_order = 0;
};

class WorkerRegistry {
 public:
  explicit WorkerRegistry(uint64_t session, double heartbeat_interval_s = 1.0)
      : session_(session), interval_(heartbeat_interval_s) {}

  v1::RegisterResponse Register(const v1::RegisterRequest& req);
  bool Heartbeat(const v1::HeartbeatRequest& req);

  // Workers seen within `timeout`, in registration order.
  std::vector<WorkerRecord> Alive(std::chrono::milliseconds timeout) const;
  std::vector<WorkerRecord> All() const;
  // Waits until `n` workers are alive or `deadline` passes; returns how many are.
  size_t WaitForWorkers(size_t n, std::chrono::steady_clock::time_point deadline);

 private:
  const uint64_t session_;
  const double interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, WorkerRecord> workers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_REGISTRY_H_
