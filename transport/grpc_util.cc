#include "transport/grpc_util.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "grpc/support/log.h"
#include "transport/address.h"
#include "transport/security.h"
#include "util/logging.h"

namespace cascade {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // Frames are small and latency matters more than batching on the wire.
  args.SetInt(GRPC_ARG_TCP_READ_CHUNK_SIZE, 64 * 1024);
  return grpc::CreateCustomChannel(address, ChannelCredentials(), args);
}

void ConfigureServer(grpc::ServerBuilder* builder, int idle_ms) {
  builder->SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder->SetMaxSendMessageSize(kMaxMessageBytes);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // A connection with no call for a minute is closed (a GOAWAY: the client reconnects when
  // it next calls). Clients that try every coordinator, standbys included, keep a channel
  // to each; without this a standby holds their sockets for as long as they run.
  builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, idle_ms);
  // A port another server holds is an error, never shared (gRPC sets SO_REUSEPORT
  // otherwise, and two servers on one port would split the connections between them).
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
}

absl::Status CheckPortFree(const std::string& who, const std::string& listen,
                           const std::string& flag) {
  absl::StatusOr<HostPort> hp = ParseHostPort(listen);
  if (!hp.ok() || hp->port == 0) return absl::OkStatus();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(hp->port);
  if (getaddrinfo(hp->host.empty() ? nullptr : hp->host.c_str(), port.c_str(), &hints, &found) !=
      0) {
    return absl::OkStatus();
  }
  bool in_use = false;
  for (addrinfo* a = found; a != nullptr && !in_use; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;  // as gRPC binds: a port in TIME_WAIT is free, a listening one is not
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    in_use = bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE;
    close(fd);
  }
  freeaddrinfo(found);
  if (!in_use) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      who, " port ", listen, " is already in use: another process (another `cascade serve`?) "
      "listens there; stop it, or pass ", flag, " to listen elsewhere"));
}

absl::StatusOr<StartedServer> StartServer(const std::string& who, const std::string& listen,
                                          std::shared_ptr<grpc::ServerCredentials> credentials,
                                          std::initializer_list<grpc::Service*> services,
                                          const std::string& flag) {
  if (absl::Status st = CheckPortFree(who, listen, flag); !st.ok()) return st;
  grpc::ServerBuilder builder;
  ConfigureServer(&builder);
  StartedServer started;
  builder.AddListeningPort(listen, std::move(credentials), &started.port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  started.server = builder.BuildAndStart();
  if (!started.server || started.port == 0) {
    return absl::UnavailableError(absl::StrCat(who, ": cannot listen on ", listen,
                                               " (is another server using the port? ", flag,
                                               " moves it)"));
  }
  return started;
}

namespace {

void GrpcLogToSpdlog(gpr_log_func_args* args) {
  if (args->severity == GPR_LOG_SEVERITY_ERROR) {
    spdlog::info("grpc: {} ({}:{})", args->message, args->file, args->line);
  } else {
    spdlog::debug("grpc: {} ({}:{})", args->message, args->file, args->line);
  }
}

}  // namespace

void RouteGrpcLogsToSpdlog() { gpr_set_log_function(GrpcLogToSpdlog); }

absl::string_view PresentedMetadata(const grpc::ServerContext& ctx, absl::string_view key) {
  const auto& md = ctx.client_metadata();
  const auto it = md.find(grpc::string_ref(key.data(), key.size()));
  return it == md.end() ? absl::string_view() : absl::string_view(it->second.data(), it->second.size());
}

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace cascade
