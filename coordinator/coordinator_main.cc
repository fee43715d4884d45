// cascade-coordinator: plans the pipeline over the workers that register, loads the
// stages, and serves the Inference API (gRPC, with health and reflection). SIGTERM or
// SIGINT drains: no new requests (health NOT_SERVING at once), running ones get
// --drain-timeout-s to finish, then the stages are unloaded and the process exits 0.
// With --etcd it is one of several coordinators: it serves once elected leader, and one
// that loses the leadership starts again (the same binary and arguments) as a standby.
#include <iostream>

#include "CLI/CLI.hpp"
#include "coordinator/cluster_config.h"
#include "coordinator/coordinator_server.h"
#include "transport/grpc_util.h"
#include "util/logging.h"
#include "util/runtime.h"
#include "util/signals.h"

int main(int argc, char** argv) {
  cascade::ConfigureRuntime();
  cascade::BlockTerminationSignals();
  cascade::HeapTrimmer heap_trimmer;  // resident memory follows use (util/runtime.h)
  CLI::App app{"Cascade coordinator: plans, schedules and streams", "cascade-coordinator"};
  app.get_formatter()->column_width(40);
  cascade::ClusterConfig config;
  std::string config_file = cascade::FindConfigFlag(argc, argv), log_level = "info";
  if (!config_file.empty()) {
    // The file first, so that flags given on the command line override it.
    if (auto st = cascade::LoadClusterFile(config_file, &config); !st.ok()) {
      std::cerr << "cascade-coordinator: " << st.message() << "\n";
      return 2;
    }
  }
  app.add_option("--config", config_file, "YAML cluster file (flags override it)");
  cascade::AddClusterFlags(app, &config);
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (auto st = cascade::InitLogging(log_level, "coordinator"); !st.ok()) {
    std::cerr << "cascade-coordinator: " << st.message() << "\n";
    return 2;
  }
  cascade::RouteGrpcLogsToSpdlog();
  // A coordinator that loses the leadership (--etcd) starts again, as a standby.
  auto server = cascade::CoordinatorServer::Start(
      config, [](const std::string&) { cascade::RequestRestart(); });
  if (!server.ok()) {
    std::cerr << "cascade-coordinator: " << server.status().message() << "\n";
    return 1;
  }
  const int sig = cascade::WaitForTerminationSignal();
  if (sig == cascade::kRestartSignal) {
    spdlog::warn("lost the leadership: starting again as a standby");
    (*server)->Shutdown();
    server->reset();
    spdlog::default_logger()->flush();
    cascade::ReExec(argv);
  }
  spdlog::info("signal {}: draining (up to {} s)", sig, config.bring_up.drain_timeout_s);
  (*server)->Drain(std::chrono::milliseconds(
      static_cast<int64_t>(1000 * config.bring_up.drain_timeout_s)));
  spdlog::info("stopped");
  return 0;
}
