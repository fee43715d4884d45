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
//
// This file reads the flags; the job itself, phase by phase, is launch/mpi_job.h.
#include <mpi.h>

#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "coordinator/cluster_config.h"
#include "launch/mpi_job.h"
#include "util/logging.h"
#include "util/runtime.h"
#include "util/signals.h"

namespace cascade {
namespace {

// Reads the command line (and --config) into `config` and `flags`, and starts logging.
// Returns the exit status when the process is to end now (--help, a bad flag or file).
std::optional<int> ParseFlags(int argc, char** argv, int rank, ClusterConfig* config,
                              LaunchFlags* flags) {
  CLI::App app{"Cascade as one MPI job: coordinator on rank 0, tensor-parallel stages",
               "cascade-mpi"};
  app.get_formatter()->column_width(40);
  config->data_plane.kind = DataPlane::kMpi;  // unless the file or a flag says otherwise
  std::string config_file = FindConfigFlag(argc, argv);
  if (!config_file.empty()) {
    if (absl::Status st = LoadClusterFile(config_file, config); !st.ok()) {
      if (rank == 0) std::cerr << "cascade-mpi: " << st.message() << "\n";
      return kExitUsage;
    }
  }
  app.add_option("--config", config_file, "YAML cluster file (flags override it)");
  AddClusterFlags(app, config);
  app.add_option("--tp", flags->tp,
                 "Ranks per pipeline stage (tensor parallelism inside a node; default: every "
                 "rank of a node)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--ranks-per-node", flags->ranks_per_node,
                 "Ranks per node (default: the ranks sharing a machine); lets one machine "
                 "pretend to be several nodes")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--threads", flags->threads,
                 "Compute threads per rank (default: the machine's cores / its ranks)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--memory", flags->memory,
                 "Memory per rank, e.g. 8GiB (default: available / ranks on the machine)");
  app.add_option("--address-file", flags->address_file,
                 "Rank 0 writes the public API's address (host:port) here once serving");
  app.add_option("--log-level", flags->log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (rank == 0) return app.exit(e);
    return e.get_exit_code();
  }
  if (absl::Status st = InitLogging(flags->log_level, absl::StrCat("rank ", rank)); !st.ok()) {
    if (rank == 0) std::cerr << "cascade-mpi: " << st.message() << "\n";
    return kExitUsage;
  }
  return std::nullopt;
}

// The flags, then the job's phases (launch/mpi_job.h); the exit status. Everything the
// job made is gone when this returns, before MPI_Finalize.
int Run(int argc, char** argv, int rank, int size) {
  ClusterConfig config;
  LaunchFlags flags;
  if (std::optional<int> exit = ParseFlags(argc, argv, rank, &config, &flags)) return *exit;
  MpiJob job(rank, size, std::move(config), std::move(flags));
  return job.Run();
}

}  // namespace
}  // namespace cascade

int main(int argc, char** argv) {
  cascade::ConfigureRuntime();
  cascade::BlockTerminationSignals();  // before MPI starts threads: they inherit the mask
  cascade::BlockDrainSignal();         // SIGUSR1 likewise
  cascade::HeapTrimmer heap_trimmer;  // resident memory follows use (util/runtime.h)
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
    return cascade::kExitUsage;
  }
  const int rc = cascade::Run(argc, argv, rank, size);
  MPI_Finalize();
  return rc;
}
