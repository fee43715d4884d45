// WorkerServer: a worker process's gRPC services (Worker control plane and StagePipe data
// plane), its TCP data plane (worker/tcp_link.h; the same frames without HTTP/2) and its
// registration with the coordinator.
//
// Contract:
// - Start() binds the listen address (port 0 picks a free port) and, when a coordinator is
//   given, registers with it (retrying until it answers) and sends heartbeats; a
//   coordinator that forgot the worker (restart) gets a new registration. Unless
//   data_listen is "off", it also listens for data-plane frames over TCP and registers
//   that address as tcp://<advertised host>:<port>; frames from either transport reach
//   the same stage with the same checks.
// - LoadStage replaces any loaded stage: the old executor finishes the frames it holds,
//   then the new stage starts. Requests are validated (layer range, KV size, addresses)
//   and errors come back as grpc::Status with the reason.
// - Thread-safe; Shutdown() stops serving and joins every thread.
#ifndef CASCADE_WORKER_WORKER_SERVER_H_
#define CASCADE_WORKER_WORKER_SERVER_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "cascade/v1/worker.grpc.pb.h"
#include "worker/grpc_link.h"
#include "worker/stage_executor.h"
#include "worker/tcp_link.h"

namespace cascade {

struct WorkerOptions {
  std::string listen = "0.0.0.0:0";
  std::string advertise;  // address peers use to reach this worker; default: host:port
  // TCP data plane: host:port to listen on ("" = the listen host, a free port; "off" =
  // gRPC only). Its advertised host is the advertise address's.
  std::string data_listen;
  std::string coordinator;  // register here ("" = wait to be called)
  std::string worker_id;    // default: the advertised address
  std::string node;         // default: the host name
  int threads = 1;
  uint64_t memory_bytes = 0;  // 0: MemAvailable of this machine
  double gflops = 0;          // relative speed for planning; 0: threads
  std::string device = "cpu";
};

class WorkerServer {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerOptions& options);
  ~WorkerServer();

  const std::string& address() const { return advertise_; }
  // tcp://host:port of the TCP data plane, or "" when it is off.
  const std::string& data_address() const { return data_advertise_; }
  const std::string& worker_id() const { return options_.worker_id; }
  void Wait();
  void Shutdown();

 private:
  class WorkerServiceImpl;
  WorkerServer() = default;
  void RegistrationLoop();
  v1::WorkerResources Resources() const;

  WorkerOptions options_;
  std::string advertise_;
  std::string data_advertise_;
  std::unique_ptr<WorkerServiceImpl> worker_service_;
  StagePipeService pipe_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<TcpFrameServer> data_server_;
  std::thread registration_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

// Bytes of memory available on this machine (MemAvailable), or 0 if unknown.
uint64_t AvailableMemoryBytes();

}  // namespace cascade

#endif  // CASCADE_WORKER_WORKER_SERVER_H_
