// Leadership: a coordinator's part in a cluster of coordinators (--etcd): standby until
// elected (coordinator/leader_election.h), then leader, and deposed once it loses. It
// decides what the coordinator may do in each part and says so; the CoordinatorServer
// wires its servers and the replica set to it.
//
//   standby --elected--> leader --lost--> deposed (the process starts again as a standby)
//
// Contract:
// - Start() campaigns. When elected, `on_elected(epoch, order)` runs (on the election's
//   thread) with the previous leader's plan, its workers in stage order ("" when none
//   was written): the coordinator brings the cluster up. When the leadership is lost,
//   `on_lost(why)` runs there: the coordinator stops at once.
// - MayServe() is OK only for the leader; a standby's and a deposed coordinator's refusal
//   is Unavailable naming the leader (or why it lost), for clients and workers alike.
// - OfferPlan/OfferAddresses write what a successor reads (the plan's workers in stage
//   order; the leader's public addresses) through the election's thread, never blocking.
// - Resign() gives the leadership up at once (a drain or shutdown); Thread-safe.
#ifndef CASCADE_COORDINATOR_LEADERSHIP_H_
#define CASCADE_COORDINATOR_LEADERSHIP_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/control_plane.pb.h"
#include "coordinator/cluster_config.h"
#include "coordinator/leader_election.h"

namespace cascade {

class Leadership {
 public:
  struct Hooks {
    std::function<void(int64_t epoch, const std::vector<std::string>& order)> on_elected;
    std::function<void(const std::string& why)> on_lost;
  };
  // `identity`: this coordinator's control address, what workers are told to register at.
  static absl::StatusOr<std::unique_ptr<Leadership>> Create(const HaConfig& config,
                                                            std::string identity, Hooks hooks);
  ~Leadership();

  void Start();
  void Resign();

  absl::Status MayServe() const ABSL_LOCKS_EXCLUDED(mu_);
  // Who leads, as far as known ("" when not): a standby's refusals name it.
  std::string leader() const { return election_->leader(); }
  void Fill(v1::Leadership* out) const ABSL_LOCKS_EXCLUDED(mu_);

  // The plan's workers in stage order (replica by replica), for a successor.
  void OfferPlan(const std::vector<std::string>& worker_ids);
  void OfferAddresses(const std::string& addresses);

 private:
  enum class Role { kStandby, kLeader, kDeposed };
  static constexpr char kPlanKey[] = "plan";
  static constexpr char kAddressesKey[] = "leader-api";
  Leadership(const HaConfig& config, Hooks hooks) : config_(config), hooks_(std::move(hooks)) {}
  void Elected(int64_t epoch) ABSL_LOCKS_EXCLUDED(mu_);
  void Lost(const std::string& why) ABSL_LOCKS_EXCLUDED(mu_);

  const HaConfig config_;
  const Hooks hooks_;
  std::unique_ptr<LeaderElection> election_;  // made by Create, before any thread
  mutable absl::Mutex mu_;
  Role role_ ABSL_GUARDED_BY(mu_) = Role::kStandby;
  std::string lost_reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_LEADERSHIP_H_
