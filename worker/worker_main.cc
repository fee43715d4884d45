// cascade-worker: a worker process. It registers with the coordinator, which tells it
// which pipeline stage to load; then it runs that stage until stopped. SIGTERM or SIGINT
// drains it first: the frames it holds are finished, the stage unloaded, then it exits 0.
// With --on-coordinator-loss exit it also exits, 0 when the coordinator it registered with
// is lost, 1 when it could not register within --register-timeout-s.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "util/logging.h"
#include "util/runtime.h"
#include "util/signals.h"
#include "transport/grpc_util.h"
#include "transport/security.h"
#include "util/secret.h"
#include "util/units.h"
#include "worker/worker_server.h"

int main(int argc, char** argv) {
  cascade::ConfigureRuntime();
  cascade::BlockTerminationSignals();
  cascade::HeapTrimmer heap_trimmer;  // resident memory follows use (util/runtime.h)
  CLI::App app{"Cascade worker: runs one pipeline stage", "cascade-worker"};
  app.get_formatter()->column_width(40);
  cascade::WorkerOptions o;
  std::string memory, device = "auto", log_level = "info", join_token_file;
  cascade::TlsFiles tls;
  o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("--coordinator,-c", o.coordinator,
                 "The coordinator's control address (host:port, its --control-listen), or "
                 "every coordinator's, comma-separated: it follows whichever leads")
      ->required();
  app.add_option("--listen,-l", o.listen, "Address to listen on (port 0 picks one)")
      ->capture_default_str();
  app.add_option("--advertise", o.advertise,
                 "Address other processes use to reach this worker (default: listen host:port)");
  app.add_option("--data-listen", o.data_listen,
                 "TCP data plane address (default: the listen host, a free port; off: gRPC "
                 "only)");
  app.add_option("--data-advertise", o.data_advertise,
                 "Address others send this worker's frames to (host:port; default: the data "
                 "plane's own, e.g. a proxy or NAT in front of it)");
  app.add_option("--id", o.worker_id, "Stable worker name (default: the advertised address)");
  app.add_option("--node", o.node, "Node name (default: host name)");
  app.add_option("--threads,-t", o.threads, "Compute threads")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--memory", memory, "Memory this worker may use, e.g. 8GiB (default: what is available on this machine, divided among the workers there that were given none)");
  app.add_option("--gflops", o.gflops, "Relative speed for planning (default: --threads)");
  std::string on_loss = "wait";
  app.add_option("--on-coordinator-loss", on_loss,
                 "When the coordinator stops answering: unload and 'wait' for one, or 'exit'")
      ->check(CLI::IsMember({"wait", "exit"}))
      ->capture_default_str();
  double grace_s = 30;
  app.add_option("--coordinator-grace-s", grace_s,
                 "Seconds without an answer from the coordinator before it counts as lost")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  double register_timeout_s = 120;
  app.add_option("--register-timeout-s", register_timeout_s,
                 "With --on-coordinator-loss exit: seconds to keep trying to register (refused "
                 "or unanswered) before exiting 1")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  app.add_option("--cost-per-hour", o.cost_per_hour,
                 "What this worker (its node share) costs per hour, for the cost metrics")
      ->check(CLI::Range(0.0, 1e9).description("NONNEGATIVE"))
      ->capture_default_str();
  app.add_option("--device", device, "auto, cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--model-dir", o.model_dir,
                 "Open models only under this folder (default: wherever the coordinator says)");
  app.add_option("--join-token-file", join_token_file,
                 "File holding the cluster's join token (when the coordinator asks for one)");
  app.add_option("--tls-cert", tls.cert, "This worker's certificate (PEM): mTLS on every link");
  app.add_option("--tls-key", tls.key, "Its private key (PEM)");
  app.add_option("--tls-ca", tls.ca, "The cluster's CA certificate (PEM)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (auto st = cascade::InitLogging(log_level, "worker"); !st.ok()) {
    std::cerr << "cascade-worker: " << st.message() << "\n";
    return 2;
  }
  cascade::RouteGrpcLogsToSpdlog();
  if (auto st = cascade::SetTransportSecurity(tls); !st.ok()) {
    std::cerr << "cascade-worker: " << st.message() << "\n";
    return 2;
  }
  if (!join_token_file.empty()) {
    auto token = cascade::ReadSecretFile(join_token_file);
    if (!token.ok()) {
      std::cerr << "cascade-worker: --join-token-file: " << token.status().message() << "\n";
      return 2;
    }
    o.join_token = *token;
  }
  auto parsed_device = cascade::ParseDevice(device);
  if (!parsed_device.ok()) {
    std::cerr << "cascade-worker: --device: " << parsed_device.status().message() << "\n";
    return 2;
  }
  o.device = *parsed_device;
  if (!memory.empty()) {
    auto bytes = cascade::ParseBytes(memory);
    if (!bytes.ok()) {
      std::cerr << "cascade-worker: --memory " << bytes.status().message() << "\n";
      return 2;
    }
    o.memory_bytes = *bytes;
  }
  o.on_coordinator_loss = on_loss == "exit" ? cascade::WorkerOptions::CoordinatorLoss::kExit
                                            : cascade::WorkerOptions::CoordinatorLoss::kWait;
  o.coordinator_grace = std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  // Wakes the signal wait below, as a SIGTERM would (process-directed: every thread has
  // the termination signals blocked and only the main thread waits for them).
  o.on_coordinator_lost = [] { ::kill(::getpid(), SIGTERM); };
  o.register_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(register_timeout_s * 1000));
  // Never registered: a failure, so exit 1 (a supervisor sees that it could not join).
  static std::atomic<int> exit_code{0};
  o.on_register_failed = [] {
    exit_code = 1;
    ::kill(::getpid(), SIGTERM);
  };
  auto server = cascade::WorkerServer::Start(o);
  if (!server.ok()) {
    std::cerr << "cascade-worker: " << server.status().message() << "\n";
    return 1;
  }
  const int sig = cascade::WaitForTerminationSignal();
  spdlog::info("signal {}: draining", sig);  // or the coordinator was lost (see above)
  (*server)->Drain();
  (*server)->Shutdown();
  return exit_code.load();
}
