// The TCP data plane: activation frames and step results as length-prefixed, versioned
// frames (worker/tcp_wire.h) on plain TCP connections beside the gRPC services. It carries
// the same cascade.v1 messages as StagePipe.Forward and Coordinator.Results, without
// HTTP/2's framing, flow control and callback threads: on a small model a token's hop over
// gRPC cost ~0.25 ms of receiver CPU, which the stage computing a token pays for.
//
// Addresses of this transport are written "tcp://host:port"; MakeActivationSender and
// MakeResultSender pick the transport from the address, so a stage or the coordinator can
// be pointed at either.
//
// Contract:
// - TcpActivationSender / TcpResultSender behave as their gRPC counterparts
//   (grpc_link.h): connect lazily, waiting up to `connect_timeout` (a refused connection is
//   retried until then); a Send on a link that broke reconnects once and otherwise fails
//   with Unavailable naming the peer; Send is serialized (any thread); Close() shuts the
//   sending side, waits up to 5 s for the peer to finish what it read, then drops the
//   connection; a Send waiting to connect gives up within 100 ms of Close() or
//   StopReconnecting(). Rejections come back as FrameAck frames, counted and logged.
// - TcpFrameServer accepts up to `max_connections` connections and reads each on its own
//   thread. Frames are handed to the handler in arrival order; a frame whose header is
//   bad, a connection that ends or stalls inside a frame, and a handler error each close
//   that connection with a logged reason and affect no other. Shutdown() stops accepting,
//   closes every connection and joins every thread; the handler must not block forever
//   (close the queues it feeds first).
#ifndef CASCADE_WORKER_TCP_LINK_H_
#define CASCADE_WORKER_TCP_LINK_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "cascade/v1/worker.pb.h"
#include "worker/activation_channel.h"
#include "worker/grpc_link.h"
#include "worker/tcp_wire.h"

namespace cascade {

// One outgoing data-plane connection with reconnection; the base of both senders.
class TcpLink {
 public:
  // Called on the link's reader thread for each frame the peer sends back.
  using OnFrame = std::function<void(TcpFrameKind kind, const std::string& body)>;
  TcpLink(std::string address, std::string peer_name, std::chrono::milliseconds connect_timeout,
          OnFrame on_frame);
  ~TcpLink();
  absl::Status Send(TcpFrameKind kind, const google::protobuf::MessageLite& msg);
  void Close();
  void StopReconnecting() { closing_.store(true); }

 private:
  struct Reader;
  absl::Status Connect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Disconnect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string address_;
  const std::string peer_;  // "next stage at tcp://..." for messages
  const std::chrono::milliseconds connect_timeout_;
  const OnFrame on_frame_;
  std::atomic<bool> closing_{false};
  std::mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  Fd fd_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Reader> reader_ ABSL_GUARDED_BY(mu_);
  std::thread reader_thread_ ABSL_GUARDED_BY(mu_);
  std::string scratch_ ABSL_GUARDED_BY(mu_);
};

class TcpActivationSender : public ActivationSender {
 public:
  explicit TcpActivationSender(
      std::string address, std::chrono::milliseconds connect_timeout = std::chrono::seconds(10));
  absl::Status Send(StageFrame frame) override;
  void Close() override { link_.Close(); }
  void StopReconnecting() override { link_.StopReconnecting(); }
  uint64_t rejected() const { return rejected_->load(); }

 private:
  std::shared_ptr<std::atomic<uint64_t>> rejected_;
  std::mutex mu_;
  v1::ActivationFrame wire_ ABSL_GUARDED_BY(mu_);  // reused between Sends
  TcpLink link_;
};

class TcpResultSender : public ResultSender {
 public:
  explicit TcpResultSender(std::string address,
                           std::chrono::milliseconds connect_timeout = std::chrono::seconds(10));
  absl::Status Send(StepResult result) override;
  void Close() override { link_.Close(); }
  void StopReconnecting() override { link_.StopReconnecting(); }

 private:
  std::mutex mu_;
  v1::StepResult wire_ ABSL_GUARDED_BY(mu_);
  TcpLink link_;
};

// Picks the transport from the address: "tcp://host:port" -> TCP, otherwise gRPC.
std::unique_ptr<ActivationSender> MakeActivationSender(const std::string& address);
std::unique_ptr<ResultSender> MakeResultSender(const std::string& address);

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
  // A data plane beside a gRPC server that listens on `grpc_listen`: on `listen`, or, when
  // it is empty, on grpc_listen's host with a free port.
  static absl::StatusOr<std::unique_ptr<TcpFrameServer>> StartBeside(const std::string& listen,
                                                                     const std::string& grpc_listen,
                                                                     std::string name,
                                                                     Handler handler);
  ~TcpFrameServer();
  int port() const { return port_; }
  // tcp://<host of `advertise`>:port(): where peers that reach this process's gRPC
  // server at `advertise` (host:port) send frames.
  std::string AdvertisedAddress(const std::string& advertise) const;
  // Connections being served now (accepted and not yet ended).
  int open_connections() const;
  void Shutdown();

 private:
  struct Connection;
  TcpFrameServer() = default;
  void AcceptLoop();
  void Serve(Connection* c);
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::string name_;
  Handler handler_;
  int max_connections_ = 64;
  int port_ = 0;
  Fd listen_fd_;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
};

// A data-plane handler that routes activation frames to a stage's StagePipe service (the
// same validation as the gRPC path) and answers rejections with a FrameAck. Undecodable
// bodies and frames of another kind close the connection.
TcpFrameServer::Handler ActivationHandler(StagePipeService* pipe);

}  // namespace cascade

#endif  // CASCADE_WORKER_TCP_LINK_H_
