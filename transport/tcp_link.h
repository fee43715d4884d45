// The TCP data plane: activation frames and step results as length-prefixed, versioned
// frames (transport/tcp_wire.h) on plain TCP connections. It carries the same cascade.v1
// messages as the gRPC data plane without HTTP/2's framing, flow control and callback
// threads: on a small model a token's hop over gRPC cost ~0.25 ms of receiver CPU, which
// the stage computing a token pays for.
//
// Contract:
// - MakeTcpActivationSender / MakeTcpResultSender are ReconnectingLinks with a TCP dialer
//   (see there for connection, reconnection and closing); one reader thread per connection
//   takes the peer's rejection notices.
// - TcpFrameServer accepts up to `max_connections` connections and reads each on its own
//   thread. Frames are handed to the handler in arrival order; a frame whose header is
//   bad, a connection that ends or stalls inside a frame, and a handler error each close
//   that connection with a logged reason and affect no other. CloseConnections() drops
//   every open connection and keeps listening; Shutdown() stops accepting, closes every
//   connection and joins every thread; the handler must not block forever (close the
//   queues it feeds first).
#ifndef CASCADE_TRANSPORT_TCP_LINK_H_
#define CASCADE_TRANSPORT_TCP_LINK_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "transport/address.h"
#include "transport/inbox.h"
#include "transport/link.h"
#include "transport/tcp_wire.h"

namespace cascade {

std::unique_ptr<ActivationSender> MakeTcpActivationSender(const HostPort& target,
                                                          const SenderOptions& options = {});
std::unique_ptr<ResultSender> MakeTcpResultSender(const HostPort& target,
                                                  const SenderOptions& options = {});

class TcpFrameServer {
 public:
  // Writes a frame back on the connection the current frame came from.
  using Reply = std::function<absl::Status(TcpFrameKind, const google::protobuf::MessageLite&)>;
  // Handles one frame; `peer` names the sender. A non-OK status closes the connection.
  using Handler = std::function<absl::Status(TcpFrameKind kind, const std::string& body,
                                             const std::string& peer, const Reply& reply)>;

  // `listen` is host:port (port 0 picks one); `name` prefixes log lines.
  static absl::StatusOr<std::unique_ptr<TcpFrameServer>> Start(const std::string& listen,
                                                               std::string name, Handler handler,
                                                               int max_connections = 64);
  ~TcpFrameServer();
  int port() const { return port_; }
  // Connections being served now (accepted and not yet ended).
  int open_connections() const ABSL_LOCKS_EXCLUDED(mu_);
  void CloseConnections() ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Connection;
  TcpFrameServer() = default;
  void AcceptLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void Serve(Connection* c);
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::string name_;
  Handler handler_;
  int max_connections_ = 64;
  int port_ = 0;
  Fd listen_fd_;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  mutable absl::Mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
};

// The data-plane handler of a process, for the TCP server: activation frames go to
// handlers.frames (rejections answered with a FrameAck on the same connection), results
// to handlers.results. A frame of a kind the process does not take, or a body that does
// not parse, closes the connection.
TcpFrameServer::Handler DataPlaneHandler(DataPlaneHandlers handlers);

}  // namespace cascade

#endif  // CASCADE_TRANSPORT_TCP_LINK_H_
