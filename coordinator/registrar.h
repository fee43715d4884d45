// Registrar: the door of the control plane. It checks a worker's registration (the join
// token, compared in constant time; the request's fields; the frame protocol version),
// enters it in the WorkerRegistry and answers with the worker's session secret and the
// coordinator's secret; heartbeats go to the registry. One per coordinator, whether the
// coordinator runs one pipeline (ClusterController) or several (ReplicaSet).
//
// Contract: thread-safe. A refused registration is logged once per (worker, listen
// address, reason) in kRefusalLogInterval, so a stranger retrying cannot flood the log.
#ifndef CASCADE_COORDINATOR_REGISTRAR_H_
#define CASCADE_COORDINATOR_REGISTRAR_H_

#include <chrono>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/control_plane.pb.h"
#include "coordinator/registry.h"

namespace cascade {

class Registrar {
 public:
  static constexpr std::chrono::seconds kRefusalLogInterval{60};

  // `registry` must outlive the registrar. `join_token`: what a worker must present ("" =
  // anyone may); `coordinator_secret`: what the coordinator presents to workers.
  Registrar(WorkerRegistry* registry, std::string join_token, std::string coordinator_secret)
      : registry_(registry),
        join_token_(std::move(join_token)),
        coordinator_secret_(std::move(coordinator_secret)) {}

  // PermissionDenied says whether no token was sent or it does not match; InvalidArgument
  // without an id or address; FailedPrecondition for another protocol version.
  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& req,
                                                const std::string& presented_token);
  // Known (false: register again), or PermissionDenied without the session secret.
  absl::StatusOr<bool> Heartbeat(const v1::HeartbeatRequest& req) {
    return registry_->Heartbeat(req);
  }
  // Coordinators that elect a leader (coordinator/leader_election.h): a standby refuses
  // registrations (Unavailable, naming the leader it knows so the worker tries it); the
  // leader's registrations carry its epoch. A coordinator alone leads at epoch 0.
  // `leader()` names the leader as far as known ("" when not).
  void StandBy(std::function<std::string()> leader) ABSL_LOCKS_EXCLUDED(mu_);
  void Lead(uint64_t epoch) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `presented` is the join token (always, when none is set): for status queries.
  bool MayQuery(const std::string& presented) const;
  const std::string& coordinator_secret() const { return coordinator_secret_; }

 private:
  using Clock = std::chrono::steady_clock;
  bool ShouldLogRefusal(const std::string& key) ABSL_LOCKS_EXCLUDED(mu_);

  WorkerRegistry* const registry_;
  const std::string join_token_;
  const std::string coordinator_secret_;
  absl::Mutex mu_;
  std::map<std::string, Clock::time_point> refusals_logged_ ABSL_GUARDED_BY(mu_);
  bool standby_ ABSL_GUARDED_BY(mu_) = false;
  std::function<std::string()> leader_ ABSL_GUARDED_BY(mu_);  // while standing by
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_REGISTRAR_H_
