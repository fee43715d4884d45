// DataPlaneServer: the receiving side of one process's data plane on every transport it
// offers besides gRPC (whose StagePipe service lives on the process's gRPC server, see
// transport/grpc_link.h): a TCP listener and, optionally, an in-process endpoint and a
// registered transport (MPI). Frames
// and results from all of them reach the same handlers with the same checks.
//
// Contract: Start binds everything or nothing (a taken port is an error naming it);
// addresses are what peers should be told. Shutdown() closes every connection and joins
// every thread; the handlers' targets must outlive it. Thread-safe.
#ifndef CASCADE_TRANSPORT_DATA_PLANE_SERVER_H_
#define CASCADE_TRANSPORT_DATA_PLANE_SERVER_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "transport/factory.h"
#include "transport/inbox.h"
#include "transport/inproc.h"
#include "transport/tcp_link.h"

namespace cascade {

struct DataPlaneServerOptions {
  std::string name;  // "worker w1 data plane": prefixes log lines
  // host:port for the TCP listener; "" = none. Port 0 picks a free one.
  std::string tcp_listen;
  // The host peers reach this process at (its advertised gRPC host).
  std::string advertise_host;
  // Also serve inproc://<inproc_name> when set.
  std::string inproc_name;
  // Also receive on this registered transport (mpi://, see transport/factory.h).
  std::optional<Scheme> registered;
  int max_connections = 64;
};

class DataPlaneServer {
 public:
  static absl::StatusOr<std::unique_ptr<DataPlaneServer>> Start(
      const DataPlaneServerOptions& options, DataPlaneHandlers handlers);
  ~DataPlaneServer();

  // tcp://advertise_host:port, or "" without a TCP listener.
  const std::string& tcp_address() const { return tcp_address_; }
  // inproc://name, or "".
  std::string inproc_address() const { return inproc_ ? inproc_->address() : ""; }
  // The registered transport's address (e.g. mpi://3), or "".
  std::string registered_address() const { return listener_ ? listener_->address() : ""; }
  // Drops the connections open now (peers reconnect); keeps listening.
  void CloseConnections();
  int open_connections() const { return tcp_ ? tcp_->open_connections() : 0; }
  void Shutdown();

 private:
  DataPlaneServer() = default;
  std::unique_ptr<TcpFrameServer> tcp_;
  std::unique_ptr<InProcEndpoint> inproc_;
  std::unique_ptr<DataPlaneListener> listener_;
  std::string tcp_address_;
};

// The TCP data plane's listen address beside a gRPC server listening on `grpc_listen`:
// `data_listen` when given, else grpc_listen's host with a free port.
std::string DataListenBeside(const std::string& data_listen, const std::string& grpc_listen);

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_DATA_PLANE_SERVER_H_
