// RankWatchdog: finds a rank of a cascade-mpi job that died or stopped answering and ends
// the job naming it, instead of leaving the other ranks waiting on it forever.
//
//   - Each rank checks, every 250 ms, the processes of the ranks on its own machine
//     (RankInfo host and pid): one that no longer exists, or is a zombie, is lost. When
//     several are, the one seen gone first is named: a thread of its own, which makes no
//     MPI call, notes every 50 ms when each went. (Open MPI can hold every thread's MPI
//     calls while one tries to reach the dead peer; by the time the check ran, the rank
//     that had found the loss and left was gone too, and was named instead.)
//   - Rank 0 and every other rank exchange heartbeats every 500 ms on a private duplicate
//     of the world communicator; a rank silent for `timeout` (5 s) is lost (a stopped
//     process, or one on another machine). Rank 0 watches every rank, the others watch
//     rank 0.
//   - The rank that finds a lost one prints "cascade-mpi rank R: lost rank L (pid P on
//     H): WHY" on stderr, tells every rank, and exits with kExitRankLost without waiting
//     for MPI; every rank told prints the same line and exits too (a rank that leaves
//     because of a loss is not itself reported lost, however soon it is gone). So within
//     about `timeout` + 1 s every rank is gone and the job exits non-zero.
//
// Contract:
// - FindLost() checks at once (a SIGTERM from mpirun after a rank died: the caller names
//   it and exits non-zero instead of draining).
// - BroadcastStop() (rank 0) tells every rank the job ends in order: each runs its on_stop
//   callback once (on the watchdog's thread). StandDown() ends loss detection on this
//   rank: ranks that shut down in order leave at different times, and that is no loss.
// - Thread-safe. Needs MPI_THREAD_MULTIPLE. The destructor stops the thread; call it
//   before MPI_Finalize.
#ifndef CASCADE_LAUNCH_WATCHDOG_H_
#define CASCADE_LAUNCH_WATCHDOG_H_

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "parallel/mpi_util.h"
#include "cascade/v1/mpi.pb.h"

namespace cascade {

constexpr int kExitRankLost = 3;

struct WatchdogOptions {
  std::chrono::milliseconds interval{500};  // heartbeats
  std::chrono::milliseconds timeout{5000};  // silence that makes a rank lost
  std::function<void()> on_stop;            // rank 0 said the job ends
};

class RankWatchdog {
 public:
  // `ranks`: every rank's RankInfo, by rank.
  static absl::StatusOr<std::unique_ptr<RankWatchdog>> Start(MPI_Comm world,
                                                             std::vector<v1::RankInfo> ranks,
                                                             WatchdogOptions options);
  ~RankWatchdog();

  struct Lost {
    int rank = -1;
    std::string what;  // "rank L (pid P on H): WHY"
  };
  // The first rank found lost now (or that another rank said was lost), if any.
  std::optional<Lost> FindLost() ABSL_LOCKS_EXCLUDED(mu_);
  // Prints the loss, tells the others (when `tell`), and exits the process (kExitRankLost)
  // after a moment, so that the ranks on this machine find the lost rank before they
  // find this one gone.
  [[noreturn]] void ExitLost(const Lost& lost, bool tell = true) ABSL_LOCKS_EXCLUDED(mu_);
  void BroadcastStop();
  void StandDown() { standing_down_.store(true); }

 private:
  RankWatchdog() = default;
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  // Every 50 ms, NoteLocalGoneLocked (no MPI call).
  void LocalLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // For each rank on this machine not yet seen gone whose process is gone now (ProcessGone):
  // notes why, and `now` as when.
  void NoteLocalGoneLocked(std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(int to, const v1::RankNotice& notice);
  void Receive() ABSL_LOCKS_EXCLUDED(mu_);
  std::string Describe(int rank) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  std::vector<v1::RankInfo> ranks_;
  WatchdogOptions options_;
  std::thread thread_;        // heartbeats, notices, the checks (MPI)
  std::thread local_thread_;  // LocalLoop
  std::atomic<bool> stop_{false};
  std::atomic<bool> standing_down_{false};
  std::atomic<bool> stop_seen_{false};
  absl::Mutex mu_;
  std::vector<std::chrono::steady_clock::time_point> last_seen_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> left_ ABSL_GUARDED_BY(mu_);  // in order, or because of a loss
  // Why and when each rank on this machine was first seen gone (why empty: not yet).
  std::vector<std::string> gone_why_ ABSL_GUARDED_BY(mu_);
  std::vector<std::chrono::steady_clock::time_point> gone_at_ ABSL_GUARDED_BY(mu_);
  std::optional<Lost> told_lost_ ABSL_GUARDED_BY(mu_);  // a loss another rank found
  MpiSendQueue sends_;  // heartbeats and notices in flight
};

}  // namespace cascade

#endif  // CASCADE_LAUNCH_WATCHDOG_H_
