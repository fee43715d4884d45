// cascade-mpi: a whole Cascade cluster as one MPI job.
//
//   mpirun -np N build/bin/cascade-mpi --model M --listen ADDR [--tp T] [--ranks-per-node K]
//          [any cascade-coordinator option]
//   srun --mpi=pmix build/bin/cascade-mpi ...        (the same, under Slurm)
//
// The ranks find their nodes (MPI_Comm_split_type SHARED, or --ranks-per-node), form a
// tensor-parallel group of T ranks per pipeline stage inside each node (launch/topology.h),
// and rank 0 runs the coordinator exactly as cascade-coordinator does (public gRPC API with
// health and reflection, the OpenAI HTTP API with --http-listen). The leader of each group
// registers with it as one worker; the group's other ranks follow their leader
// (worker/tp_group.h). Activations and results travel on the MPI data plane (mpi://RANK;
// --data-plane tcp or grpc instead). A rank that dies or stops answering ends the job
// within seconds, every rank naming it, exit status 3 (launch/watchdog.h). SIGUSR1 (which
// mpirun forwards to every rank; it kills ranks about 1 s after forwarding a SIGTERM) or
// SIGTERM to every rank (srun, scancel) drains: rank 0 lets running requests finish
// (--drain-timeout-s), the stages are unloaded, every rank exits 0.
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <thread>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cascade/v1/mpi.pb.h"
#include "coordinator/cluster_config.h"
#include "coordinator/coordinator_server.h"
#include "kernels/gpu.h"
#include "launch/topology.h"
#include "launch/watchdog.h"
#include "parallel/mpi_collective.h"
#include "transport/address.h"
#include "transport/mpi_link.h"
#include "util/logging.h"
#include "util/runtime.h"
#include "util/signals.h"
#include "util/system_memory.h"
#include "util/units.h"
#include "worker/tp_group.h"
#include "worker/worker_server.h"
#if defined(CASCADE_WITH_NCCL)
#include "parallel/nccl_collective.h"
#include "transport/nccl_link.h"
#endif

namespace cascade {
namespace {

struct LaunchFlags {
  int tp = 0;              // ranks per stage (0: every rank of a node)
  int ranks_per_node = 0;  // 0: as the machines say
  int threads = 0;         // compute threads per rank (0: the node's cores / its ranks)
  std::string memory;      // memory per rank ("" = available / ranks on the machine)
  std::string address_file;
  std::string log_level = "info";
};

// How a rank's job ends: what decides how it stops (drain, wait for rank 0) and its exit
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
  void Set(EndKind kind, std::string why) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (kind_ != EndKind::kNone) return;
    kind_ = kind;
    why_ = std::move(why);
  }
  // Waits for a reason (up to `timeout`): its kind (kNone on timeout) and its words.
  std::pair<EndKind, std::string> Wait(absl::Duration timeout = absl::InfiniteDuration())
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto set = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return kind_ != EndKind::kNone; };
    mu_.AwaitWithTimeout(absl::Condition(&set), timeout);
    return {kind_, why_};
  }

 private:
  absl::Mutex mu_;
  EndKind kind_ ABSL_GUARDED_BY(mu_) = EndKind::kNone;
  std::string why_ ABSL_GUARDED_BY(mu_);
};

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

// Everyone exits with `code` after rank 0 said why (errors before serving).
[[noreturn]] void FailAll(int rank, const std::string& why, int code) {
  if (!why.empty()) std::fprintf(stderr, "cascade-mpi rank %d: %s\n", rank, why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

// An address other machines can use for a server whose advertised address is
// `address` (127.0.0.1 for a wildcard listen): this machine's name then.
std::string Reachable(const std::string& address, bool one_machine) {
  if (one_machine) return address;
  auto hp = ParseHostPort(address);
  if (!hp.ok() || hp->host != "127.0.0.1") return address;
  return HostPort{HostName(), hp->port}.ToString();
}

int Run(int argc, char** argv, int rank, int size) {
  CLI::App app{"Cascade as one MPI job: coordinator on rank 0, tensor-parallel stages",
               "cascade-mpi"};
  app.get_formatter()->column_width(40);
  ClusterConfig config;
  config.data_plane.kind = DataPlane::kMpi;  // unless the file or a flag says otherwise
  LaunchFlags lf;
  std::string config_file = FindConfigFlag(argc, argv);
  if (!config_file.empty()) {
    if (absl::Status st = LoadClusterFile(config_file, &config); !st.ok()) {
      if (rank == 0) std::cerr << "cascade-mpi: " << st.message() << "\n";
      return 2;
    }
  }
  app.add_option("--config", config_file, "YAML cluster file (flags override it)");
  AddClusterFlags(app, &config);
  app.add_option("--tp", lf.tp,
                 "Ranks per pipeline stage (tensor parallelism inside a node; default: every "
                 "rank of a node)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--ranks-per-node", lf.ranks_per_node,
                 "Ranks per node (default: the ranks sharing a machine); lets one machine "
                 "pretend to be several nodes")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--threads", lf.threads,
                 "Compute threads per rank (default: the machine's cores / its ranks)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--memory", lf.memory,
                 "Memory per rank, e.g. 8GiB (default: available / ranks on the machine)");
  app.add_option("--address-file", lf.address_file,
                 "Rank 0 writes the public API's address (host:port) here once serving");
  app.add_option("--log-level", lf.log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (rank == 0) return app.exit(e);
    return e.get_exit_code();
  }
  if (absl::Status st = InitLogging(lf.log_level, absl::StrCat("rank ", rank)); !st.ok()) {
    if (rank == 0) std::cerr << "cascade-mpi: " << st.message() << "\n";
    return 2;
  }

  // Who is where.
  auto world = MpiCollective::Create(MPI_COMM_WORLD, "MPI world");
  if (!world.ok()) FailAll(rank, std::string(world.status().message()), 1);
  v1::RankInfo mine;
  mine.set_rank(rank);
  mine.set_host(HostName());
  mine.set_pid(::getpid());
  const int machine = MachineKey(rank);
  auto infos_bytes = AllGatherStrings(**world, mine.SerializeAsString());
  auto keys_bytes = AllGatherStrings(**world, std::to_string(machine));
  if (!infos_bytes.ok() || !keys_bytes.ok()) FailAll(rank, "cannot exchange rank information", 1);
  std::vector<v1::RankInfo> ranks(size);
  std::vector<int> keys(size);
  for (int r = 0; r < size; ++r) {
    ranks[r].ParseFromString((*infos_bytes)[r]);
    keys[r] = std::stoi((*keys_bytes)[r]);
  }
  auto topo = MakeTopology(keys, lf.tp, lf.ranks_per_node);
  if (!topo.ok()) {
    if (rank == 0) std::cerr << "cascade-mpi: " << topo.status().message() << "\n";
    return 2;
  }
  const RankPlace& place = topo->ranks[rank];
  for (int r = 0; r < size; ++r) ranks[r].set_node(topo->ranks[r].node);
  int ranks_on_machine = 0;
  for (int r = 0; r < size; ++r) ranks_on_machine += keys[r] == machine;
  bool one_machine = true;
  for (int r = 0; r < size; ++r) one_machine &= keys[r] == keys[0];
  if (rank == 0) {
    spdlog::info("{} ranks: {}", size, topo->Describe());
    for (int r = 0; r < size; ++r) {
      const RankPlace& p = topo->ranks[r];
      spdlog::info("rank {}: pid {} on {}, node {}, stage {} (rank {} of its group{})", r,
                   ranks[r].pid(), ranks[r].host(), p.node, p.group, p.group_rank,
                   p.group_rank == 0 ? ", leader" : "");
    }
  }

  // This rank's stage group and the job's data plane and watchdog.
  MPI_Comm group_comm;
  MPI_Comm_split(MPI_COMM_WORLD, place.group, rank, &group_comm);
  const int group_size = topo->group_size(place.group);
  auto group = MpiCollective::Create(
      group_comm, absl::StrCat("stage ", place.group, " (ranks ", topo->leaders[place.group], "-",
                               topo->leaders[place.group] + group_size - 1, ")"));
  if (!group.ok()) FailAll(rank, std::string(group.status().message()), 1);
  auto plane = MpiDataPlane::Start(MPI_COMM_WORLD);
  if (!plane.ok()) FailAll(rank, std::string(plane.status().message()), 1);
  (*plane)->RegisterWithFactory();
  StopReason stop, ended;
  WatchdogOptions wo;
  wo.on_stop = [&stop, &ended] {
    stop.Set(EndKind::kEndedByRank0, "rank 0 ended the job");
    ended.Set(EndKind::kEndedByRank0, "rank 0 ended the job");
  };
  auto watchdog = RankWatchdog::Start(MPI_COMM_WORLD, ranks, wo);
  if (!watchdog.ok()) FailAll(rank, std::string(watchdog.status().message()), 1);

  // Each rank computes on its own device: one GPU per rank of a node with --device cuda.
  DeviceSpec device{DeviceKind::kCpu, 0};
  if (config.stage.device && config.stage.device->kind == DeviceKind::kCuda) {
    // The node's GPUs in turn; a task that sees one GPU only (Slurm's --gpus-per-task)
    // uses that one.
    std::string why;
    const int gpus = static_cast<int>(ListGpus(&why).size());
    if (gpus == 0) FailAll(rank, absl::StrCat("--device cuda: no GPU is usable here: ", why), 2);
    device = {DeviceKind::kCuda, place.node_rank % gpus};
  }
  config.stage.device.reset();  // the workers' own setting applies, per rank
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = lf.threads > 0 ? lf.threads : std::max(1, cores / ranks_on_machine);
  uint64_t memory = AvailableMemoryBytes() / static_cast<uint64_t>(ranks_on_machine);
  if (!lf.memory.empty()) {
    auto m = ParseBytes(lf.memory);
    if (!m.ok()) FailAll(rank, absl::StrCat("--memory: ", m.status().message()), 2);
    memory = *m;
  }
  // The group's compute collective: the MPI group on CPUs, NCCL between GPUs.
  Collective* compute = group->get();
#if defined(CASCADE_WITH_NCCL)
  std::unique_ptr<NcclCollective> nccl;
  if (device.kind == DeviceKind::kCuda && group_size > 1) {
    auto n = NcclCollective::Create(**group, device.index,
                                    absl::StrCat("NCCL stage ", place.group));
    if (!n.ok()) FailAll(rank, std::string(n.status().message()), 1);
    nccl = std::move(*n);
    compute = nccl.get();
  }
  // Between GPU stages of one node, activations go over NCCL: mpi:// to a rank of this node
  // becomes nccl:// (transport/nccl_link.h); other ranks and the results stay on MPI.
  std::unique_ptr<MpiCollective> node_group;
  std::unique_ptr<NcclDataPlane> nccl_plane;
  if (device.kind == DeviceKind::kCuda) {
    MPI_Comm node_comm;
    MPI_Comm_split(MPI_COMM_WORLD, place.node, rank, &node_comm);
    auto ng = MpiCollective::Create(node_comm, absl::StrCat("node ", place.node));
    if (!ng.ok()) FailAll(rank, std::string(ng.status().message()), 1);
    node_group = std::move(*ng);
    std::vector<int> node_ranks;
    for (int r = 0; r < size; ++r) {
      if (topo->ranks[r].node == place.node) node_ranks.push_back(r);
    }
    auto np = NcclDataPlane::Start(plane->get(), *node_group, node_ranks, device.index);
    if (!np.ok()) FailAll(rank, std::string(np.status().message()), 1);
    nccl_plane = std::move(*np);
    nccl_plane->RegisterWithFactory();
    TransportFactory mpi = (*plane)->Factory();
    auto same_node = [&topo, &place](int r) {
      return r >= 0 && r < static_cast<int>(topo->ranks.size()) &&
             topo->ranks[r].node == place.node;
    };
    TransportFactory routed = mpi;
    routed.activation = [mpi, same_node](const Address& a, const SenderOptions& o)
        -> absl::StatusOr<std::unique_ptr<ActivationSender>> {
      if (!same_node(a.rank)) return mpi.activation(a, o);
      return MakeActivationSender(absl::StrCat("nccl://", a.rank), o);
    };
    RegisterTransport(Scheme::kMpi, std::move(routed));
  }
#else
  if (device.kind == DeviceKind::kCuda && group_size > 1) {
    FailAll(rank, "--device cuda with tensor parallelism needs a build with CUDA and NCCL", 2);
  }
#endif

  // Rank 0: the coordinator, as cascade-coordinator runs it.
  std::unique_ptr<CoordinatorServer> coordinator;
  std::string control;
  if (rank == 0) {
    config.bring_up.workers = topo->groups;
    if (config.plan.min_stages == 1) config.plan.min_stages = topo->groups;  // every stage
    auto c = CoordinatorServer::Start(config);
    if (!c.ok()) {
      std::cerr << "cascade-mpi: " << c.status().message() << "\n";
    } else {
      coordinator = std::move(*c);
      control = config.server.advertise.empty()
                    ? Reachable(coordinator->control_address(), one_machine)
                    : config.server.advertise;
    }
  }
  if (!BroadcastString(**world, &control, 0).ok() || control.empty()) {
    FailAll(rank, rank == 0 ? "" : "rank 0 could not start the coordinator", 1);
  }

  // The leaders register as workers one after the other, in pipeline order (the
  // coordinator's plan follows registration order).
  std::unique_ptr<TpLeader> leader;
  std::unique_ptr<WorkerServer> worker;
  const StageHostOptions host_options{
      .threads = threads, .device = device, .model_dir = "", .tp = nullptr};
  for (int g = 0; g < topo->groups; ++g) {
    if (place.group == g && place.group_rank == 0) {
      if (group_size > 1) leader = std::make_unique<TpLeader>(group->get(), compute);
      WorkerOptions w;
      w.listen = one_machine ? "127.0.0.1:0" : "0.0.0.0:0";
      w.coordinator = control;
      w.worker_id = absl::StrCat("rank-", rank);
      w.node = lf.ranks_per_node > 0 ? absl::StrCat(HostName(), "/node-", place.node) : HostName();
      w.threads = threads;
      w.memory_bytes = memory;
      w.device = device;
      w.data_listen = config.data_plane.kind == DataPlane::kMpi    ? "mpi"
                      : config.data_plane.kind == DataPlane::kGrpc ? "off"
                                                                   : "";
      w.tp = leader.get();
      auto s = WorkerServer::Start(w);
      if (!s.ok()) FailAll(rank, std::string(s.status().message()), 1);
      worker = std::move(*s);
      if (!one_machine) {
        // Reachable addresses: the worker advertises its machine's name.
        spdlog::debug("worker {} at {}", worker->worker_id(), worker->address());
      }
      if (!worker->WaitRegistered(std::chrono::seconds(120))) {
        FailAll(rank, "the coordinator did not take this rank's registration in 120 s", 1);
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // The other ranks of a group follow their leader.
  std::thread follower;
  if (place.group_rank != 0) {
    follower = std::thread([&, compute] {
      TpFollower f(group->get(), compute, host_options);
      absl::Status st = f.Run();
      if (!st.ok()) {
        spdlog::error("the stage group broke: {}", st.message());
        stop.Set(EndKind::kGroupBroke, absl::StrCat("the stage group broke: ", st.message()));
      }
    });
  }

  // Rank 0 says where the cluster serves.
  if (rank == 0) {
    absl::Status st = coordinator->WaitUntilServing(
        std::chrono::seconds(std::max(1, config.bring_up.worker_wait_s)));
    if (!st.ok()) {
      std::cerr << "cascade-mpi: the cluster did not come up: " << st.message() << "\n";
      stop.Set(EndKind::kBringUpFailed, "bring-up failed");
    } else {
      const std::string api = Reachable(coordinator->address(), one_machine);
      std::fprintf(stderr, "cascade-mpi: serving %s on %s%s (%d ranks: %s)\n",
                   config.model.c_str(), api.c_str(),
                   coordinator->http_port() > 0
                       ? absl::StrCat("; HTTP on port ", coordinator->http_port()).c_str()
                       : "",
                   size, topo->Describe().c_str());
      std::fflush(stderr);
      if (!lf.address_file.empty()) {
        std::ofstream out(lf.address_file + ".tmp");
        out << api << "\n";
        out.close();
        std::rename((lf.address_file + ".tmp").c_str(), lf.address_file.c_str());
      }
    }
  }

  // Until a signal, rank 0's stop, or a broken group.
  std::thread signals([&stop] {
    const int sig = WaitForTerminationSignal();
    stop.Set(EndKind::kSignal, absl::StrCat("signal ", sig));
  });
  signals.detach();
  // mpirun forwards SIGUSR1 to every rank (and kills ranks ~1 s after a SIGTERM): the way to
  // drain a job under mpirun. Blocked in main, before any thread.
  std::thread drain_signal([&stop] {
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    int sig = 0;
    sigwait(&usr1, &sig);
    stop.Set(EndKind::kDrainSignal, absl::StrCat("signal ", sig, " (drain)"));
  });
  drain_signal.detach();
  const auto [end, why] = stop.Wait();
  const bool signalled = end == EndKind::kSignal || end == EndKind::kDrainSignal;
  if (signalled) {
    // mpirun ends every rank with SIGTERM when one dies, and kills it a moment later: name
    // the lost rank and fail at once, rather than drain.
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (auto lost = (*watchdog)->FindLost()) (*watchdog)->ExitLost(*lost);
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
  }
  spdlog::info("ending: {}", why);
  // A bound on the orderly end: past it, the rank exits anyway.
  const double drain_s = config.bring_up.drain_timeout_s;
  std::thread([rank, drain_s] {
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(1000 * drain_s)) +
                                std::chrono::seconds(30));
    std::fprintf(stderr, "cascade-mpi rank %d: the orderly end took too long; exiting\n", rank);
    std::_Exit(4);
  }).detach();
  const bool failed = end == EndKind::kBringUpFailed || end == EndKind::kGroupBroke;
  if (rank == 0) {
    coordinator->Drain(std::chrono::milliseconds(static_cast<int64_t>(1000 * drain_s)));
    (*watchdog)->BroadcastStop();
  } else if (signalled) {
    // Rank 0 drains the cluster (it got the signal too, under mpirun) and then ends the
    // job; the stages must serve until then.
    ended.Wait(absl::Seconds(drain_s + 10));
  }
  (*watchdog)->StandDown();
  if (worker) {
    worker->Drain();
    worker->Shutdown();
  }
  if (leader) {
    if (absl::Status st = leader->Stop(); !st.ok()) spdlog::warn("stopping the group: {}", st.message());
  }
  if (follower.joinable()) follower.join();
  coordinator.reset();
#if defined(CASCADE_WITH_NCCL)
  nccl_plane.reset();
#endif
  (*plane)->Shutdown();
  watchdog->reset();
  spdlog::info("stopped");
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace cascade

int main(int argc, char** argv) {
  cascade::ConfigureRuntime();
  cascade::BlockTerminationSignals();  // before MPI starts threads: they inherit the mask
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, nullptr);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (provided < MPI_THREAD_MULTIPLE) {
    if (rank == 0) {
      std::cerr << "cascade-mpi: this MPI library does not offer MPI_THREAD_MULTIPLE\n";
    }
    MPI_Finalize();
    return 2;
  }
  const int rc = cascade::Run(argc, argv, rank, size);
  MPI_Finalize();
  return rc;
}
