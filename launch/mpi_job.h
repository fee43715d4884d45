// MpiJob: one rank's part in a cascade-mpi job (the whole cluster as one MPI job), as named
// phases that every rank runs in the same order (Run):
//
//   Discover         the ranks describe themselves (RankInfo: host, pid) and their machines
//   Place            the topology (launch/topology.h): nodes, tensor-parallel groups, the
//                    pipeline order of the groups; rank 0 logs where every rank sits
//   ChooseResources  this rank's device (cuda:<its index on the node> with --device cuda),
//                    compute threads and memory
//   StartWatchdog    the RankWatchdog (launch/watchdog.h): a lost rank ends the job, named
//   BuildGroups      the stage group's communicator, and NCCL between its GPUs
//   StartDataPlane   the MPI data plane (mpi://RANK), and with GPUs the NCCL data plane
//                    between a node's ranks; activations routed by transport/route.h
//   StartRoles       rank 0: the coordinator (as cascade-coordinator runs it); the group
//                    leaders: a worker server each, registered one after the other in
//                    pipeline order; every other rank: its leader's follower (TpFollower)
//   AnnounceServing  rank 0: "cascade-mpi: serving MODEL on HOST:PORT ..." and --address-file
//   AwaitEnd         until a signal, rank 0's stop, a broken group or a failed bring-up
//   ShutDown         rank 0 drains the coordinator and tells every rank to stop; each rank
//                    stops its roles and data planes
//
// Exit status (Run's result): 0 an orderly end; 1 a failure (a phase on some rank, a
// broken group, a cluster that did not come up); 2 settings that cannot work (flags, the
// topology, devices); 3 a lost rank (kExitRankLost, launch/watchdog.h, which exits
// itself); 4 an orderly end that took longer than --drain-timeout-s + 30 s.
//
// Failure: a phase that fails on a rank ends the whole job at once (MPI_Abort: the other
// ranks may be waiting on it in a collective), after that rank prints "cascade-mpi rank R:
// WHY" (rank 0's own reason for a coordinator that did not start is printed as
// "cascade-mpi: WHY"). A refused topology is the exception: every rank computes the same
// one, so rank 0 prints "cascade-mpi: WHY" and every rank returns 2 in order.
//
// Threads: the phases run on the calling thread, which must have SIGINT, SIGTERM and
// SIGUSR1 blocked before MPI started any thread (so that every thread inherits the mask);
// MPI must offer MPI_THREAD_MULTIPLE. The job starts threads of its own: a follower's TP
// loop (joined by ShutDown), and, detached, the signal waiters (which hold nothing of the
// job but its shared stop reason) and a bound on the orderly end. What the job made is
// destroyed before Run returns or in its destructor, which must run before MPI_Finalize.
#ifndef CASCADE_LAUNCH_MPI_JOB_H_
#define CASCADE_LAUNCH_MPI_JOB_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cascade/v1/mpi.pb.h"
#include "coordinator/cluster_config.h"
#include "coordinator/coordinator_server.h"
#include "launch/topology.h"
#include "launch/watchdog.h"
#include "parallel/mpi_collective.h"
#include "tensor/device.h"
#include "transport/mpi_link.h"
#include "worker/tp_group.h"
#include "worker/worker_server.h"

namespace cascade {

// The settings of cascade-mpi beyond the coordinator's own (ClusterConfig).
struct LaunchFlags {
  int tp = 0;              // ranks per stage (0: every rank of a node)
  int ranks_per_node = 0;  // 0: as the machines say
  int threads = 0;         // compute threads per rank (0: the machine's cores / its ranks)
  std::string memory;      // memory per rank ("" = available / ranks on the machine)
  std::string address_file;
  std::string log_level = "info";
};

// SIGUSR1, the drain signal (mpirun forwards it to every rank): block it on the main thread
// before MPI starts any thread, as BlockTerminationSignals (util/signals.h) does for SIGINT
// and SIGTERM; AwaitEnd waits for both.
void BlockDrainSignal();

inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitEndTooSlow = 4;

class MpiJob {
 public:
  // `rank` and `size` in MPI_COMM_WORLD; `config` as the flags and --config left it.
  MpiJob(int rank, int size, ClusterConfig config, LaunchFlags flags);
  ~MpiJob();
  MpiJob(const MpiJob&) = delete;
  MpiJob& operator=(const MpiJob&) = delete;

  // Runs the phases in order (or ends the job as "Failure" says); the exit status.
  int Run();

 private:
  // How the job ends: what decides how a rank stops (drain, wait for rank 0) and its exit
  // status.
  enum class EndKind {
    kNone,           // not yet
    kEndedByRank0,   // rank 0 ended the job (after its drain)
    kSignal,         // SIGTERM / SIGINT: mpirun or Slurm ending the job, or an operator
    kDrainSignal,    // SIGUSR1: drain, then end
    kGroupBroke,     // the stage's tensor-parallel group failed: exit 1
    kBringUpFailed,  // the cluster did not come up: exit 1
  };

  // Why the job ends (the first reason given), as the main thread learns it.
  class StopReason {
   public:
    void Set(EndKind kind, std::string why) ABSL_LOCKS_EXCLUDED(mu_);
    // Waits for a reason (up to `timeout`): its kind (kNone on timeout) and its words.
    std::pair<EndKind, std::string> Wait(absl::Duration timeout = absl::InfiniteDuration())
        ABSL_LOCKS_EXCLUDED(mu_);

   private:
    absl::Mutex mu_;
    EndKind kind_ ABSL_GUARDED_BY(mu_) = EndKind::kNone;
    std::string why_ ABSL_GUARDED_BY(mu_);
  };

  // NCCL between the GPUs of a group and of a node (a build with CUDA and NCCL, --device
  // cuda); empty otherwise.
  struct Nccl;

  // The phases, in order. Each fails as the header's "Failure" says.
  absl::Status Discover();
  absl::Status Place();
  absl::Status ChooseResources();
  absl::Status StartWatchdog();
  absl::Status BuildGroups();
  absl::Status StartDataPlane();
  absl::Status StartRoles();
  void AnnounceServing();
  void AwaitEnd();
  int ShutDown();

  // Parts of StartRoles: rank 0's coordinator (the control address workers register at),
  // a leader's worker server, a follower's thread.
  absl::StatusOr<std::string> StartCoordinator();
  absl::Status StartWorker(const std::string& control);
  void StartFollower();
  // Where this rank's stage group, node and job sit.
  const RankPlace& place() const { return topo_.ranks[rank_]; }
  int group_size() const { return topo_.group_size(place().group); }
  bool signalled() const { return end_ == EndKind::kSignal || end_ == EndKind::kDrainSignal; }

  const int rank_;
  const int size_;
  ClusterConfig config_;
  const LaunchFlags flags_;

  // Discover, Place.
  std::unique_ptr<MpiCollective> world_;
  std::vector<v1::RankInfo> ranks_;  // by world rank
  std::vector<int> machines_;        // by world rank: equal for the ranks of one machine
  Topology topo_;
  bool one_machine_ = true;
  int ranks_on_machine_ = 1;

  // ChooseResources.
  DeviceSpec device_{DeviceKind::kCpu, 0};
  int threads_ = 1;
  uint64_t memory_ = 0;

  // StartWatchdog, AwaitEnd.
  std::shared_ptr<StopReason> stop_ = std::make_shared<StopReason>();  // any reason to end
  StopReason ended_;                                                   // rank 0 ended the job
  std::unique_ptr<RankWatchdog> watchdog_;
  EndKind end_ = EndKind::kNone;
  std::string why_;

  // BuildGroups, StartDataPlane.
  std::unique_ptr<MpiCollective> group_;
  Collective* compute_ = nullptr;  // the group's compute collective: group_ or NCCL's
  std::unique_ptr<MpiDataPlane> plane_;
  std::unique_ptr<Nccl> nccl_;

  // StartRoles.
  std::unique_ptr<CoordinatorServer> coordinator_;  // rank 0
  std::unique_ptr<TpLeader> leader_;                // a leader of a group of several ranks
  std::unique_ptr<WorkerServer> worker_;            // the leaders
  std::thread follower_;                            // the other ranks
};

}  // namespace cascade

#endif  // CASCADE_LAUNCH_MPI_JOB_H_
