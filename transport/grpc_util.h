// gRPC plumbing shared by the worker and the coordinator: explicit message-size limits and
// keepalive on every channel and server, and absl::Status <-> grpc::Status at the RPC edge.
#ifndef CASCADE_TRANSPORT_GRPC_UTIL_H_
#define CASCADE_TRANSPORT_GRPC_UTIL_H_

#include <initializer_list>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace cascade {

// Largest message on any Cascade channel: an activation frame of 8192 tokens x 8192 dims.
constexpr int kMaxMessageBytes = 256 << 20;

// Metadata keys of Cascade's credentials on gRPC calls: the join token a worker presents
// to register (and an operator to read the cluster's status), and the coordinator's secret
// it presents to workers' control services.
constexpr char kJoinTokenMetadata[] = "x-cascade-join-token";
constexpr char kCoordinatorMetadata[] = "x-cascade-coordinator";

// A channel with Cascade's limits: message sizes, keepalive pings that detect a dead peer
// within ~15 s, and bounded reconnect backoff.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// How long a server keeps a client's connection that has no call in flight.
constexpr int kServerConnectionIdleMs = 60'000;

// Applies the same limits to a server, and closes a connection after `idle_ms` without a
// call (the client reconnects when it next calls).
void ConfigureServer(grpc::ServerBuilder* builder, int idle_ms = kServerConnectionIdleMs);

// A server with those limits on `listen`, serving `services` (which must outlive it).
// `who` names the port in errors ("control", "worker"), `flag` the option that moves it.
// A port another process listens on already is found before gRPC tries it:
// Unavailable, "control port 127.0.0.1:50053 is already in use: ...; pass
// --control-listen ..." (ports are never shared); any other failure to listen is
// Unavailable naming the address. `port` is the port it listens on (the one chosen for :0).
struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};
absl::StatusOr<StartedServer> StartServer(const std::string& who, const std::string& listen,
                                          std::shared_ptr<grpc::ServerCredentials> credentials,
                                          std::initializer_list<grpc::Service*> services,
                                          const std::string& flag = "--listen");

// Unavailable, naming `who`'s port and `flag`, when a socket listens on `listen`
// (host:port) already; OK for port 0 or an address that does not resolve (gRPC's own
// errors say more then).
absl::Status CheckPortFree(const std::string& who, const std::string& listen,
                           const std::string& flag);

// gRPC's own log lines (gpr_log) go to spdlog: its errors at info, the rest at debug.
// What a user must know comes back as a status and is said once, clearly, by Cascade
// (e.g. a port in use), not as gRPC's internal error dump on stderr. Call once, early.
void RouteGrpcLogsToSpdlog();

// The value of metadata `key` that the caller of ctx presented ("" when it presented none);
// valid while ctx is.
absl::string_view PresentedMetadata(const grpc::ServerContext& ctx, absl::string_view key);

grpc::Status ToGrpc(const absl::Status& s);
absl::Status FromGrpc(const grpc::Status& s);

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_GRPC_UTIL_H_
