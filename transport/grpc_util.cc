#include "transport/grpc_util.h"

#include "absl/strings/str_cat.h"

#include "transport/security.h"

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

void ConfigureServer(grpc::ServerBuilder* builder) {
  builder->SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder->SetMaxSendMessageSize(kMaxMessageBytes);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // A port another server holds is an error, never shared (gRPC sets SO_REUSEPORT
  // otherwise, and two servers on one port would split the connections between them).
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
}

absl::StatusOr<StartedServer> StartServer(const std::string& who, const std::string& listen,
                                          std::shared_ptr<grpc::ServerCredentials> credentials,
                                          std::initializer_list<grpc::Service*> services) {
  grpc::ServerBuilder builder;
  ConfigureServer(&builder);
  StartedServer started;
  builder.AddListeningPort(listen, std::move(credentials), &started.port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  started.server = builder.BuildAndStart();
  if (!started.server || started.port == 0) {
    return absl::UnavailableError(absl::StrCat(who, ": cannot listen on ", listen,
                                               " (is another server using the port?)"));
  }
  return started;
}

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
