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

// Applies the same limits to a server.
void ConfigureServer(grpc::ServerBuilder* builder);

// A server with those limits on `listen`, serving `services` (which must outlive it).
// Unavailable, naming `who` and the address, when it cannot listen there (e.g. the port is
// taken: ports are never shared). `port` is the port it listens on (the one chosen for :0).
struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};
absl::StatusOr<StartedServer> StartServer(const std::string& who, const std::string& listen,
                                          std::shared_ptr<grpc::ServerCredentials> credentials,
                                          std::initializer_list<grpc::Service*> services);

// The value of metadata `key` that the caller of ctx presented ("" when it presented none);
// valid while ctx is.
absl::string_view PresentedMetadata(const grpc::ServerContext& ctx, absl::string_view key);

grpc::Status ToGrpc(const absl::Status& s);
absl::Status FromGrpc(const grpc::Status& s);

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_GRPC_UTIL_H_
