#include "launch/mpi_job.h"

#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/gpu.h"
#include "transport/address.h"
#include "transport/route.h"
#include "util/logging.h"
#include "util/signals.h"
#include "util/status_macros.h"
#include "util/system_memory.h"
#include "util/units.h"
#if defined(CASCADE_WITH_NCCL)
#include "parallel/nccl_collective.h"
#include "transport/nccl_link.h"
#endif

namespace cascade {
namespace {

std::string HostName() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

// The lowest world rank on this machine: equal for the ranks that share it.
int MachineKey(int rank) {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int key = rank;
  MPI_Allreduce(&rank, &key, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  return key;
}

// An address other machines can use for a server whose advertised address is
// `address` (127.0.0.1 for a wildcard listen): this machine's name then.
std::string Reachable(const std::string& address, bool one_machine) {
  if (one_machine) return address;
  auto hp = ParseHostPort(address);
  if (!hp.ok() || hp->host != "127.0.0.1") return address;
  return HostPort{HostName(), hp->port}.ToString();
}

// The ranks of MPI_COMM_WORLD with this rank's `color`, in a communicator of their own, as a
// host-memory group (collective: every rank calls it, each with its own color).
absl::StatusOr<std::unique_ptr<MpiCollective>> SplitWorld(int color, int rank, std::string name) {
  MPI_Comm comm;
  MPI_Comm_split(MPI_COMM_WORLD, color, rank, &comm);
  return MpiCollective::Create(comm, std::move(name));
}

// This rank says why (unless `why` is empty: said already) and the whole job ends with
// `code`.
[[noreturn]] void AbortJob(int rank, const absl::Status& why, int code) {
  if (!why.message().empty()) {
    std::fprintf(stderr, "cascade-mpi rank %d: %s\n", rank, std::string(why.message()).c_str());
  }
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

// Writes `text` and a newline to `path` whole: a reader sees the old file or the new one.
void WriteFileAtomically(const std::string& path, const std::string& text) {
  std::ofstream out(path + ".tmp");
  out << text << "\n";
  out.close();
  std::rename((path + ".tmp").c_str(), path.c_str());
}

sigset_t DrainSignalSet() {
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  return usr1;
}

std::chrono::milliseconds Millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(1000 * seconds));
}

}  // namespace

void BlockDrainSignal() {
  const sigset_t usr1 = DrainSignalSet();
  pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
}

struct MpiJob::Nccl {
#if defined(CASCADE_WITH_NCCL)
  std::unique_ptr<NcclCollective> group;  // the stage group's compute collective
  std::unique_ptr<MpiCollective> node;    // the node's ranks, host memory (NCCL's id)
  std::unique_ptr<NcclDataPlane> plane;   // nccl:// between the node's GPUs
  void StopDataPlane() { plane.reset(); }
#else
  void StopDataPlane() {}
#endif
};

void MpiJob::StopReason::Set(EndKind kind, std::string why) {
  absl::MutexLock lock(&mu_);
  if (kind_ != EndKind::kNone) return;
  kind_ = kind;
  why_ = std::move(why);
}

std::pair<MpiJob::EndKind, std::string> MpiJob::StopReason::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto set = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return kind_ != EndKind::kNone; };
  mu_.AwaitWithTimeout(absl::Condition(&set), timeout);
  return {kind_, why_};
}

MpiJob::MpiJob(int rank, int size, ClusterConfig config, LaunchFlags flags)
    : rank_(rank),
      size_(size),
      config_(std::move(config)),
      flags_(std::move(flags)),
      nccl_(std::make_unique<Nccl>()) {}

MpiJob::~MpiJob() {
  if (follower_.joinable()) follower_.join();
}

int MpiJob::Run() {
  if (absl::Status st = Discover(); !st.ok()) AbortJob(rank_, st, kExitFailed);
  if (absl::Status st = Place(); !st.ok()) {
    // Every rank computed the same topology and refused it alike.
    if (rank_ == 0) std::cerr << "cascade-mpi: " << st.message() << "\n";
    return kExitUsage;
  }
  if (absl::Status st = ChooseResources(); !st.ok()) AbortJob(rank_, st, kExitUsage);
  for (auto phase : {&MpiJob::StartWatchdog, &MpiJob::BuildGroups, &MpiJob::StartDataPlane,
                     &MpiJob::StartRoles}) {
    if (absl::Status st = (this->*phase)(); !st.ok()) AbortJob(rank_, st, kExitFailed);
  }
  AnnounceServing();
  AwaitEnd();
  return ShutDown();
}

// Who is where: every rank's RankInfo and machine.
absl::Status MpiJob::Discover() {
  CASCADE_ASSIGN_OR_RETURN(world_, MpiCollective::Create(MPI_COMM_WORLD, "MPI world"));
  v1::RankInfo mine;
  mine.set_rank(rank_);
  mine.set_host(HostName());
  mine.set_pid(::getpid());
  const int machine = MachineKey(rank_);
  auto infos = AllGatherStrings(*world_, mine.SerializeAsString());
  auto keys = AllGatherStrings(*world_, std::to_string(machine));
  if (!infos.ok() || !keys.ok()) return absl::UnavailableError("cannot exchange rank information");
  ranks_.resize(size_);
  machines_.resize(size_);
  for (int r = 0; r < size_; ++r) {
    if (!ranks_[r].ParseFromString((*infos)[r]) || !absl::SimpleAtoi((*keys)[r], &machines_[r])) {
      return absl::DataLossError(absl::StrCat("rank ", r, " described itself unreadably"));
    }
  }
  return absl::OkStatus();
}

// The topology, from the machines and the flags: the same on every rank.
absl::Status MpiJob::Place() {
  CASCADE_ASSIGN_OR_RETURN(topo_, MakeTopology(machines_, flags_.tp, flags_.ranks_per_node));
  const int machine = machines_[rank_];
  ranks_on_machine_ = static_cast<int>(std::count(machines_.begin(), machines_.end(), machine));
  one_machine_ = std::count(machines_.begin(), machines_.end(), machines_[0]) == size_;
  for (int r = 0; r < size_; ++r) ranks_[r].set_node(topo_.ranks[r].node);
  if (rank_ == 0) {
    spdlog::info("{} ranks: {}", size_, topo_.Describe());
    for (int r = 0; r < size_; ++r) {
      const RankPlace& p = topo_.ranks[r];
      spdlog::info("rank {}: pid {} on {}, node {}, stage {} (rank {} of its group{})", r,
                   ranks_[r].pid(), ranks_[r].host(), p.node, p.group, p.group_rank,
                   p.group_rank == 0 ? ", leader" : "");
    }
  }
  return absl::OkStatus();
}

// Each rank computes on its own device: one GPU per rank of a node with --device cuda.
absl::Status MpiJob::ChooseResources() {
  if (config_.stage.device && config_.stage.device->kind == DeviceKind::kCuda) {
    // The node's GPUs in turn; a task that sees one GPU only (Slurm's --gpus-per-task)
    // uses that one.
    std::string why;
    const int gpus = static_cast<int>(ListGpus(&why).size());
    if (gpus == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device cuda: no GPU is usable here: ", why));
    }
    device_ = {DeviceKind::kCuda, place().node_rank % gpus};
  }
  config_.stage.device.reset();  // the workers' own setting applies, per rank
#if !defined(CASCADE_WITH_NCCL)
  if (device_.kind == DeviceKind::kCuda && group_size() > 1) {
    return absl::FailedPreconditionError(
        "--device cuda with tensor parallelism needs a build with CUDA and NCCL");
  }
#endif
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads_ = flags_.threads > 0 ? flags_.threads : std::max(1, cores / ranks_on_machine_);
  memory_ = AvailableMemoryBytes() / static_cast<uint64_t>(ranks_on_machine_);
  if (!flags_.memory.empty()) {
    auto m = ParseBytes(flags_.memory);
    if (!m.ok())
      return absl::InvalidArgumentError(absl::StrCat("--memory: ", m.status().message()));
    memory_ = *m;
  }
  return absl::OkStatus();
}

absl::Status MpiJob::StartWatchdog() {
  WatchdogOptions wo;
  wo.on_stop = [this] {
    stop_->Set(EndKind::kEndedByRank0, "rank 0 ended the job");
    ended_.Set(EndKind::kEndedByRank0, "rank 0 ended the job");
  };
  CASCADE_ASSIGN_OR_RETURN(watchdog_, RankWatchdog::Start(MPI_COMM_WORLD, ranks_, wo));
  return absl::OkStatus();
}

// This rank's stage group, and its compute collective: the MPI group on CPUs, NCCL between
// GPUs.
absl::Status MpiJob::BuildGroups() {
  const int g = place().group;
  CASCADE_ASSIGN_OR_RETURN(group_,
                           SplitWorld(g, rank_,
                                      absl::StrCat("stage ", g, " (ranks ", topo_.leaders[g], "-",
                                                   topo_.leaders[g] + group_size() - 1, ")")));
  compute_ = group_.get();
#if defined(CASCADE_WITH_NCCL)
  if (device_.kind == DeviceKind::kCuda && group_size() > 1) {
    CASCADE_ASSIGN_OR_RETURN(nccl_->group, NcclCollective::Create(*group_, device_.index,
                                                                  absl::StrCat("NCCL stage ", g)));
    compute_ = nccl_->group.get();
  }
#endif
  return absl::OkStatus();
}

// The MPI data plane for mpi://, and with GPUs the NCCL one between the ranks of this node:
// activations to a rank of this node then go over NCCL (transport/route.h); other ranks and
// the results stay on MPI.
absl::Status MpiJob::StartDataPlane() {
  CASCADE_ASSIGN_OR_RETURN(plane_, MpiDataPlane::Start(MPI_COMM_WORLD));
  std::vector<int> node_of_rank(size_);
  for (int r = 0; r < size_; ++r) node_of_rank[r] = topo_.ranks[r].node;
  bool nccl_data_plane = false;
#if defined(CASCADE_WITH_NCCL)
  if (device_.kind == DeviceKind::kCuda) {
    const int node = place().node;
    CASCADE_ASSIGN_OR_RETURN(nccl_->node, SplitWorld(node, rank_, absl::StrCat("node ", node)));
    std::vector<int> node_ranks;
    for (int r = 0; r < size_; ++r) {
      if (node_of_rank[r] == node) node_ranks.push_back(r);
    }
    CASCADE_ASSIGN_OR_RETURN(
        nccl_->plane, NcclDataPlane::Start(plane_.get(), *nccl_->node, node_ranks, device_.index));
    nccl_->plane->RegisterWithFactory();
    nccl_data_plane = true;
  }
#endif
  RegisterTransport(Scheme::kMpi, RouteActivationsByNode(plane_->Factory(), std::move(node_of_rank),
                                                         place().node, nccl_data_plane));
  return absl::OkStatus();
}

// Rank 0 starts the coordinator and tells every rank where it is; then the group leaders
// register as workers one after the other, in pipeline order (the coordinator's plan follows
// registration order); the other ranks of each group follow their leader.
absl::Status MpiJob::StartRoles() {
  std::string control;
  if (rank_ == 0) {
    auto c = StartCoordinator();
    if (c.ok()) {
      control = *c;
    } else {
      std::cerr << "cascade-mpi: " << c.status().message() << "\n";
    }
  }
  if (!BroadcastString(*world_, &control, 0).ok() || control.empty()) {
    // Rank 0 has said why.
    return absl::UnavailableError(rank_ == 0 ? "" : "rank 0 could not start the coordinator");
  }
  for (int g = 0; g < topo_.groups; ++g) {
    if (place().group == g && place().group_rank == 0)
      CASCADE_RETURN_IF_ERROR(StartWorker(control));
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (place().group_rank != 0) StartFollower();
  return absl::OkStatus();
}

// Rank 0: the coordinator, as cascade-coordinator runs it, for every group as a worker.
absl::StatusOr<std::string> MpiJob::StartCoordinator() {
  if (!config_.ha.etcd.empty()) {
    return absl::InvalidArgumentError(
        "--etcd is for cascade-coordinator: under cascade-mpi rank 0 is the coordinator, and "
        "a standby would die with the job");
  }
  config_.bring_up.workers = topo_.groups;
  StageEveryWorker(topo_.groups, &config_);  // every group a stage
  CASCADE_ASSIGN_OR_RETURN(coordinator_, CoordinatorServer::Start(config_));
  if (!config_.server.advertise.empty()) return config_.server.advertise;
  return Reachable(coordinator_->control_address(), one_machine_);
}

// A group's leader: a worker server that registers at `control` for the whole group.
absl::Status MpiJob::StartWorker(const std::string& control) {
  if (group_size() > 1) leader_ = std::make_unique<TpLeader>(group_.get(), compute_);
  WorkerOptions w;
  w.listen = one_machine_ ? "127.0.0.1:0" : "0.0.0.0:0";
  w.coordinator = control;
  w.worker_id = absl::StrCat("rank-", rank_);
  w.node =
      flags_.ranks_per_node > 0 ? absl::StrCat(HostName(), "/node-", place().node) : HostName();
  w.threads = threads_;
  w.memory_bytes = memory_;
  w.device = device_;
  w.data_listen = config_.data_plane.kind == DataPlane::kMpi    ? "mpi"
                  : config_.data_plane.kind == DataPlane::kGrpc ? "off"
                                                                : "";
  w.tp = leader_.get();
  CASCADE_ASSIGN_OR_RETURN(worker_, WorkerServer::Start(w));
  if (!one_machine_) {
    // Reachable addresses: the worker advertises its machine's name.
    spdlog::debug("worker {} at {}", worker_->worker_id(), worker_->address());
  }
  if (!worker_->WaitRegistered(std::chrono::seconds(120))) {
    return absl::DeadlineExceededError(
        "the coordinator did not take this rank's registration in 120 s");
  }
  return absl::OkStatus();
}

// A follower: its leader's commands, on a thread of its own, until the group stops; a group
// that breaks ends the job.
void MpiJob::StartFollower() {
  const StageHostOptions host_options{
      .threads = threads_, .device = device_, .model_dir = "", .tp = nullptr};
  follower_ = std::thread([this, host_options] {
    TpFollower f(group_.get(), compute_, host_options);
    absl::Status st = f.Run();
    if (!st.ok()) {
      spdlog::error("the stage group broke: {}", st.message());
      stop_->Set(EndKind::kGroupBroke, absl::StrCat("the stage group broke: ", st.message()));
    }
  });
}

// Rank 0 says where the cluster serves, once it does; a cluster that does not come up in
// time ends the job.
void MpiJob::AnnounceServing() {
  if (rank_ != 0) return;
  absl::Status st = coordinator_->WaitUntilServing(
      std::chrono::seconds(std::max(1, config_.bring_up.worker_wait_s)));
  if (!st.ok()) {
    std::cerr << "cascade-mpi: the cluster did not come up: " << st.message() << "\n";
    stop_->Set(EndKind::kBringUpFailed, "bring-up failed");
    return;
  }
  const std::string api = Reachable(coordinator_->address(), one_machine_);
  std::fprintf(stderr, "cascade-mpi: serving %s on %s%s (%d ranks: %s)\n", config_.model.c_str(),
               api.c_str(),
               coordinator_->http_port() > 0
                   ? absl::StrCat("; HTTP on port ", coordinator_->http_port()).c_str()
                   : "",
               size_, topo_.Describe().c_str());
  std::fflush(stderr);
  if (!flags_.address_file.empty()) WriteFileAtomically(flags_.address_file, api);
}

// Until a signal, rank 0's stop, or a broken group.
void MpiJob::AwaitEnd() {
  // The waiters outlive the job (nothing ends them), so they share `stop_`.
  std::thread([stop = stop_] {
    const int sig = WaitForTerminationSignal();
    stop->Set(EndKind::kSignal, absl::StrCat("signal ", sig));
  }).detach();
  // mpirun forwards SIGUSR1 to every rank (and kills ranks ~1 s after a SIGTERM): the way to
  // drain a job under mpirun. Blocked by the caller, before any thread.
  std::thread([stop = stop_] {
    const sigset_t usr1 = DrainSignalSet();
    int sig = 0;
    sigwait(&usr1, &sig);
    stop->Set(EndKind::kDrainSignal, absl::StrCat("signal ", sig, " (drain)"));
  }).detach();
  std::tie(end_, why_) = stop_->Wait();
  if (signalled()) {
    // mpirun ends every rank with SIGTERM when one dies, and kills it a moment later: name
    // the lost rank and fail at once, rather than drain.
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (auto lost = watchdog_->FindLost()) watchdog_->ExitLost(*lost);
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
  }
}

// The orderly end: rank 0 drains the coordinator and tells every rank to stop; the others
// serve until then (after a signal) and every rank stops its roles and data planes.
int MpiJob::ShutDown() {
  spdlog::info("ending: {}", why_);
  // A bound on the orderly end: past it, the rank exits anyway.
  const double drain_s = config_.bring_up.drain_timeout_s;
  std::thread([rank = rank_, drain_s] {
    std::this_thread::sleep_for(Millis(drain_s) + std::chrono::seconds(30));
    std::fprintf(stderr, "cascade-mpi rank %d: the orderly end took too long; exiting\n", rank);
    std::_Exit(kExitEndTooSlow);
  }).detach();
  if (rank_ == 0) {
    coordinator_->Drain(Millis(drain_s));
    watchdog_->BroadcastStop();
  } else if (signalled()) {
    // Rank 0 drains the cluster (it got the signal too, under mpirun) and then ends the
    // job; the stages must serve until then.
    ended_.Wait(absl::Seconds(drain_s + 10));
  }
  watchdog_->StandDown();
  if (worker_) {
    worker_->Drain();
    worker_->Shutdown();
  }
  if (leader_) {
    if (absl::Status st = leader_->Stop(); !st.ok())
      spdlog::warn("stopping the group: {}", st.message());
  }
  if (follower_.joinable()) follower_.join();
  coordinator_.reset();
  nccl_->StopDataPlane();
  plane_->Shutdown();
  watchdog_.reset();
  spdlog::info("stopped");
  const bool failed = end_ == EndKind::kBringUpFailed || end_ == EndKind::kGroupBroke;
  return failed ? kExitFailed : 0;
}

}  // namespace cascade
