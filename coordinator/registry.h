// WorkerRegistry: the workers the coordinator knows, fed by Register and Heartbeat.
//
// Contract: thread-safe. A worker is alive while its last heartbeat is younger than
// liveness_timeout() (3 heartbeat intervals + 1 s: one late or lost heartbeat is not a
// death); the one definition used by the controller's monitor and by status reports.
// Register assigns (or renews) a worker's entry; Heartbeat from an unknown worker, or
// with a session other than the one Register gave it, returns false so that it registers
// again (e.g. after a coordinator restart).
#ifndef CASCADE_COORDINATOR_REGISTRY_H_
#define CASCADE_COORDINATOR_REGISTRY_H_

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/control_plane.pb.h"

namespace cascade {

struct WorkerRecord {
  std::string id;
  std::string node;
  std::string address;
  std::string data_address;  // tcp://host:port, or empty (gRPC only)
  v1::WorkerResources resources;
  v1::WorkerState state = v1::WORKER_STATE_IDLE;
  v1::StageStats stats;
  std::vector<v1::GpuStats> gpus;  // from the last heartbeat
  v1::ProcessStats process;        // the worker process's CPU and memory, likewise
  std::string error;
  std::chrono::steady_clock::time_point last_seen;
  uint64_t registered_order = 0;
  uint64_t generation = 0;  // bumped by every Register: a restarted worker is a new one
  std::string session_secret;  // given by Register; every Heartbeat must carry it
};

class WorkerRegistry {
 public:
  using Clock = std::chrono::steady_clock;
  explicit WorkerRegistry(uint64_t session, double heartbeat_interval_s = 1.0)
      : session_(session), interval_(heartbeat_interval_s) {}

  v1::RegisterResponse Register(const v1::RegisterRequest& req) ABSL_LOCKS_EXCLUDED(mu_);
  // Known (false: register again), or PermissionDenied when the worker is known but the
  // heartbeat lacks its session secret (someone speaking for it): nothing changes then.
  absl::StatusOr<bool> Heartbeat(const v1::HeartbeatRequest& req) ABSL_LOCKS_EXCLUDED(mu_);

  std::chrono::milliseconds liveness_timeout() const {
    return std::chrono::milliseconds(static_cast<int64_t>(1000 * (3 * interval_ + 1)));
  }
  bool IsAlive(const WorkerRecord& w, Clock::time_point now) const {
    return now - w.last_seen <= liveness_timeout();
  }
  // The workers (alive now / all) in the order the planner lists them: those the
  // preferred order names first, in its order, then the rest in registration order.
  std::vector<WorkerRecord> Alive() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<WorkerRecord> All() const ABSL_LOCKS_EXCLUDED(mu_);
  // A new leader's hint (coordinator/leader_election.h): the previous leader's plan, its
  // workers in stage order, so that the same workers get the same stages (kept weights)
  // whatever order they register in.
  void SetPreferredOrder(std::vector<std::string> ids) ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<WorkerRecord> Find(const std::string& id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until `n` workers are alive or `deadline` passes; returns how many are.
  size_t WaitForWorkers(size_t n, Clock::time_point deadline) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const uint64_t session_;
  const double interval_;
  mutable absl::Mutex mu_;
  std::map<std::string, WorkerRecord> workers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, size_t> preferred_ ABSL_GUARDED_BY(mu_);  // id -> its place
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_REGISTRY_H_
