// LeaderElection: one coordinator of a cluster leads; the others stand by and take over
// when its lease lapses. The leadership is a key in etcd, `<prefix>leader`, created
// under a lease only where absent (a transaction), holding the leader's control address;
// its create revision is the leader's epoch, which grows with every new leader, so a
// worker that has followed epoch E refuses a coordinator of an older one.
//
//   standby --the key is absent: create it--> leader --lease lost / key taken--> lost
//   leader --Resign()--> (key deleted, lease revoked) stopped
//
// Contract:
// - Start() campaigns on a thread of its own: every `poll` a standby reads the key (who
//   leads) and creates it when absent. A leader renews its lease every ttl/4 and checks
//   every `poll` that the key is still its own.
// - A leader is lost once etcd answers that its lease expired or the key is gone or
//   another's: `on_lost(reason)` is called once and the election stops (the coordinator
//   then stops serving at once: a successor may already lead). While etcd does not
//   answer at all the leader stays leader, says so in the log once, and keeps serving:
//   no standby can win without etcd either, and the workers' epoch check keeps a second
//   leader from driving them should one win where this one cannot reach etcd.
// - `on_elected(epoch)` is called once, on the election's thread, when this coordinator
//   becomes leader; callbacks must not call Stop()/Resign().
// - Offer(name, value) has the election's thread write `<prefix><name>` on its next round,
//   only while this coordinator leads (a guarded transaction; retried until written or
//   replaced by a newer value): what a successor reads with Read(name). It never blocks
//   on etcd, so a controller thread may call it.
// - Thread-safe.
#ifndef CASCADE_COORDINATOR_LEADER_ELECTION_H_
#define CASCADE_COORDINATOR_LEADER_ELECTION_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/etcd_client.h"

namespace cascade {

struct LeaderElectionOptions {
  std::string prefix = "/cascade/default/";  // the cluster's keys
  std::string identity;  // what the leader key holds: this coordinator's control address
  std::chrono::seconds ttl{2};                     // the lease (etcd's minimum is 2 s)
  std::chrono::milliseconds poll{250};
  std::function<void(int64_t epoch)> on_elected;
  std::function<void(const std::string& reason)> on_lost;
};

class LeaderElection {
 public:
  LeaderElection(std::unique_ptr<EtcdClient> etcd, LeaderElectionOptions options);
  ~LeaderElection();  // Stop()

  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops campaigning; a leader's key stays until its lease lapses (a crash's path).
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops and, when leading, gives the leadership up at once (key deleted, lease revoked)
  // so a standby need not wait for the lease.
  void Resign() ABSL_LOCKS_EXCLUDED(mu_);

  bool leading() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t epoch() const ABSL_LOCKS_EXCLUDED(mu_);  // 0 until elected
  // The leader's identity and epoch as last read ("" and 0 when none is known).
  std::string leader() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t leader_epoch() const ABSL_LOCKS_EXCLUDED(mu_);

  // FailedPrecondition unless leading.
  absl::Status Offer(const std::string& name, const std::string& value) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<std::optional<std::string>> Read(const std::string& name);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // One standby round: true when elected.
  bool Campaign() ABSL_LOCKS_EXCLUDED(mu_);
  // One leader round: false when the leadership is lost (`why` says how).
  bool Hold(std::string* why) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes what was offered (the election thread's, while leading).
  void WriteOffered() ABSL_LOCKS_EXCLUDED(mu_);
  // Logs an etcd failure once per change of its message.
  void NoteEtcd(const absl::Status& st);
  bool Stopping() const ABSL_LOCKS_EXCLUDED(mu_);

  const std::unique_ptr<EtcdClient> etcd_;
  const LeaderElectionOptions options_;
  const std::string key_;  // <prefix>leader
  std::thread thread_;
  std::string last_etcd_error_;  // the election thread's
  int64_t lease_ = 0;        // the election thread's (0: none)

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::string leader_ ABSL_GUARDED_BY(mu_);
  int64_t leader_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::string> offered_ ABSL_GUARDED_BY(mu_);  // not written yet
};

}  // namespace cascade

#endif  // CASCADE_COORDINATOR_LEADER_ELECTION_H_
