#include "transport/data_plane_server.h"

#include "absl/strings/str_cat.h"

namespace cascade {

std::string DataListenBeside(const std::string& data_listen, const std::string& grpc_listen) {
  if (!data_listen.empty()) return data_listen;
  return grpc_listen.substr(0, grpc_listen.rfind(':')) + ":0";
}

absl::StatusOr<std::unique_ptr<DataPlaneServer>> DataPlaneServer::Start(
    const DataPlaneServerOptions& o, DataPlaneHandlers handlers) {
  std::unique_ptr<DataPlaneServer> s(new DataPlaneServer());
  if (!o.tcp_listen.empty()) {
    auto tcp = TcpFrameServer::Start(o.tcp_listen, o.name, DataPlaneHandler(handlers),
                                     o.max_connections);
    if (!tcp.ok()) return tcp.status();
    s->tcp_ = std::move(*tcp);
    HostPort hp{o.advertise_host, s->tcp_->port()};
    s->tcp_address_ = absl::StrCat("tcp://", hp.ToString());
  }
  if (!o.inproc_name.empty()) {
    auto ep = InProcEndpoint::Register(o.inproc_name, handlers);
    if (!ep.ok()) return ep.status();
    s->inproc_ = std::move(*ep);
  }
  if (o.registered) {
    auto l = ListenOnTransport(*o.registered, handlers);
    if (!l.ok()) return l.status();
    s->listener_ = std::move(*l);
  }
  return s;
}

DataPlaneServer::~DataPlaneServer() { Shutdown(); }

void DataPlaneServer::CloseConnections() {
  if (tcp_) tcp_->CloseConnections();
}

void DataPlaneServer::Shutdown() {
  listener_.reset();
  inproc_.reset();
  if (tcp_) tcp_->Shutdown();
}

}  // namespace cascade
