// WorkerServer: a worker process put together: its gRPC server (the Worker control
// service and the StagePipe data-plane service), its TCP data plane, the StageHost that
// holds its stage, and its registration with the coordinator.
//
// Contract:
// - Start() binds the listen address (port 0 picks a free port; a taken port is an error)
//   and, when a coordinator is given, registers with it (with the leader, when several
//   are given) and sends heartbeats; a
//   coordinator that forgot the worker (restart) gets a new registration. A registration
//   that fails is tried again after a backoff, kFirstRegisterBackoff doubled by each
//   failure up to kMaxRegisterBackoff when the coordinator refused it, kMaxUnansweredBackoff
//   when it did not answer (it may be restarting). The log says so once per change of
//   the answer (refused for another reason, unreachable, registered), with at most one
//   reminder per kRegisterReminder in between, never once per attempt. With kExit, a
//   worker that has not registered within register_timeout of its start calls
//   `on_register_failed` (cascade-worker then exits 1). Unless data_listen is "off", it also listens for data-plane frames over
//   TCP and registers that address as tcp://<advertised host>:<port>, or with
//   data_listen "mpi" on the MPI data plane (mpi://RANK, in cascade-mpi); frames from
//   every transport reach the same stage with the same checks.
// - With a TpLeader the worker is the leader of a tensor-parallel group: it registers as
//   one worker with the group's size (WorkerResources.tensor_parallel; memory_bytes is
//   each rank's), and its stage is split over the group (worker/stage_host.h).
// - The control service takes LoadStage, Unload and Drain only from the coordinator the
//   worker registered with (it presents the secret of that registration); anyone may ask
//   for Status. The data plane takes only frames with the loaded stage's link key.
// - Drain() finishes the frames the stage holds and unloads it (see StageHost); Shutdown()
//   stops serving and joins every thread. Thread-safe.
#ifndef CASCADE_WORKER_WORKER_SERVER_H_
#define CASCADE_WORKER_WORKER_SERVER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/control_plane.grpc.pb.h"
#include "tensor/device.h"
#include "transport/data_plane_server.h"
#include "transport/grpc_link.h"
#include "transport/inbox.h"
#include "worker/gpu_monitor.h"
#include "worker/process_monitor.h"
#include "worker/stage_host.h"

namespace cascade {

struct WorkerOptions {
  std::string listen = "0.0.0.0:0";
  std::string advertise;  // address peers use to reach this worker; default: host:port
  // TCP data plane: host:port to listen on ("" = the listen host, a free port; "off" =
  // gRPC only; "mpi" = the MPI data plane instead). Its advertised host is the advertise
  // address's.
  std::string data_listen;
  // Where other processes send this worker's frames ("" = the data plane's own address);
  // e.g. a NAT or proxy in front of it: tcp://host:port or host:port.
  std::string data_advertise;
  // Register here ("" = wait to be called): a control address, or every coordinator of
  // the cluster comma-separated (the leader and its standbys): the worker registers with
  // whichever leads, follows a new leader when the old one stops answering (its stage
  // stays loaded), and never goes back to a leader of an older epoch.
  std::string coordinator;
  std::string worker_id;    // default: the advertised address
  std::string node;         // default: the host name
  int threads = 1;
  uint64_t memory_bytes = 0;  // 0: MemAvailable of this machine, shared with its other workers
  double gflops = 0;          // relative speed for planning; 0: threads
  DeviceSpec device{DeviceKind::kAuto, 0};
  // Presented to register ("" when the coordinator needs none).
  std::string join_token;
  // LoadStage opens models only under this folder ("" = wherever the coordinator says).
  std::string model_dir;
  double cost_per_hour = 0;  // what this worker costs per hour, for the cost metrics
  // When the coordinator it registered with stops answering for `coordinator_grace`, the
  // worker unloads its stage (that plan is gone) and then waits for a coordinator to
  // register with again (kWait), or calls `on_coordinator_lost` (kExit; cascade-worker
  // then exits 0).
  enum class CoordinatorLoss { kWait, kExit };
  CoordinatorLoss on_coordinator_loss = CoordinatorLoss::kWait;
  std::chrono::milliseconds coordinator_grace{30000};
  std::function<void()> on_coordinator_lost;
  // With kExit: how long a worker that never registered keeps trying (the coordinator
  // refuses it or does not answer) before `on_register_failed` is called.
  std::chrono::milliseconds register_timeout{120000};
  std::function<void()> on_register_failed;
  // The tensor-parallel group this worker leads (must outlive the server); null: none.
  TpLeader* tp = nullptr;
};

class WorkerServer {
 public:
  static constexpr std::chrono::milliseconds kFirstRegisterBackoff{200};
  static constexpr std::chrono::milliseconds kMaxRegisterBackoff{30000};  // refused
  static constexpr std::chrono::milliseconds kMaxUnansweredBackoff{5000};  // no answer
  static constexpr std::chrono::seconds kRegisterReminder{60};

  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerOptions& options);
  ~WorkerServer();

  const std::string& address() const { return advertise_; }
  // tcp://host:port of the TCP data plane, or "" when it is off.
  const std::string& data_address() const { return data_advertise_; }
  const std::string& worker_id() const { return options_.worker_id; }
  v1::WorkerState state() const { return host_->state(); }
  // Waits until the coordinator has accepted this worker's registration; false on timeout.
  bool WaitRegistered(std::chrono::milliseconds timeout) const ABSL_LOCKS_EXCLUDED(mu_);
  void Drain();
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  class WorkerService;
  class RegistrationLog;
  WorkerServer() = default;
  struct Following;
  void RegistrationLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Registers with coordinator `which` of `f`; refused (FailedPrecondition) when it leads
  // an older epoch than `f` has followed.
  grpc::Status RegisterWith(Following& f, size_t which, v1::RegisterResponse* resp);
  // Follows coordinator `which` from now on (its session, secret and epoch).
  void Follow(Following& f, size_t which, const v1::RegisterResponse& resp)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The followed coordinator failed (`why`): registers with whichever other one leads now.
  bool FollowNewLeader(Following& f, const grpc::Status& why) ABSL_LOCKS_EXCLUDED(mu_);
  // One Register call: its response, or the status it failed with.
  grpc::Status TryRegister(v1::Coordinator::Stub& stub, v1::RegisterResponse* resp);
  grpc::Status SendHeartbeat(v1::Coordinator::Stub& stub, uint64_t session,
                             const std::string& session_secret, v1::HeartbeatResponse* resp);
  // The coordinator's secret from the last registration ("" before one).
  std::string coordinator_secret() const ABSL_LOCKS_EXCLUDED(mu_);
  v1::WorkerResources Resources() const;

  WorkerOptions options_;
  GpuMonitor gpus_;
  ProcessMonitor process_;  // this process's CPU and memory, with each heartbeat
  std::string advertise_;
  std::string data_advertise_;
  FrameRouter router_;
  std::unique_ptr<StageHost> host_;
  std::unique_ptr<WorkerService> worker_service_;
  std::unique_ptr<StagePipeService> pipe_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<DataPlaneServer> data_;
  std::thread registration_;
  // How long a heartbeat waits for its answer (the registration thread's).
  std::chrono::milliseconds heartbeat_deadline_{5000};
  mutable absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  std::string coordinator_secret_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cascade

#endif  // CASCADE_WORKER_WORKER_SERVER_H_
