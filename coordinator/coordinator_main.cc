// cascade-coordinator: plans the pipeline over the workers that register, loads the
// stages, and serves the Inference API (gRPC, with health and reflection).
#include <iostream>

#include "CLI/CLI.hpp"
#include "coordinator/cluster_config.h"
#include "coordinator/coordinator_server.h"
#include "util/logging.h"
#include "util/runtime.h"
#include "util/signals.h"

int main(int argc, char** argv) {
  cascade::ConfigureRuntime();
  cascade::BlockTerminationSignals();
  CLI::App app{"Cascade coordinator: plans, schedules and streams", "cascade-coordinator"};
  cascade::CoordinatorOptions o;
  std::string config = cascade::FindConfigFlag(argc, argv), log_level = "info";
  if (!config.empty()) {
    // The file first, so that flags given on the command line override it.
    if (auto st = cascade::LoadClusterConfig(config, &o); !st.ok()) {
      std::cerr << "cascade-coordinator: " << st.message() << "\n";
      return 2;
    }
  }
  app.add_option("--config", config, "YAML cluster file (flags override it)");
  cascade::AddCoordinatorFlags(app, &o);
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off");
  CLI11_PARSE(app, argc, argv);
  if (auto st = cascade::InitLogging(log_level, "coordinator"); !st.ok()) {
    std::cerr << "cascade-coordinator: " << st.message() << "\n";
    return 2;
  }
  auto server = cascade::CoordinatorServer::Start(o);
  if (!server.ok()) {
    std::cerr << "cascade-coordinator: " << server.status().message() << "\n";
    return 1;
  }
  const int sig = cascade::WaitForTerminationSignal();
  spdlog::info("signal {}: shutting down", sig);
  (*server)->Shutdown();
  return 0;
}
