#include "transport/tcp_link.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/grpc_util.h"
#include "transport/reconnecting_link.h"
#include "transport/security.h"
#include "util/logging.h"

namespace cascade {
namespace {

// A TLS handshake gets this long; so does a new connection for its first frame.
constexpr std::chrono::milliseconds kHandshakeTimeout{10000};

// One outgoing TCP connection and the thread that reads what the peer sends back.
class TcpConnection : public Connection {
 public:
  TcpConnection(std::unique_ptr<ByteStream> stream, TcpFrameKind kind, std::string peer,
                AckHandler on_ack)
      : stream_(std::move(stream)), kind_(kind) {
    reader_ = std::thread([this, peer = std::move(peer), on_ack = std::move(on_ack)] {
      TcpFrameKind k;
      std::string body;
      for (;;) {
        auto got = ReadFrame(*stream_, kMaxMessageBytes, &k, &body);
        if (!got.ok()) {
          if (!finishing_.load()) spdlog::warn("data link to {} broke: {}", peer, got.status().message());
          break;
        }
        if (*got == ReadOutcome::kClosed) break;
        v1::FrameAck ack;
        if (k == TcpFrameKind::kAck && on_ack && ack.ParseFromString(body)) {
          on_ack(ack);
        } else {
          spdlog::warn("{} sent an unexpected {} frame", peer, TcpFrameKindName(k));
        }
      }
      absl::MutexLock lock(&mu_);
      done_ = true;
    });
  }
  ~TcpConnection() override { Finish(false); }

  absl::Status Write(const google::protobuf::MessageLite& msg) override {
    return WriteFrame(*stream_, kind_, msg, &scratch_);
  }
  bool broken() const override {
    absl::MutexLock lock(&mu_);
    return done_;
  }
  void Finish(bool graceful) override {
    if (!reader_.joinable()) return;
    finishing_.store(true);
    if (graceful) {
      // Let the peer read everything sent, then see the end of the stream and close.
      stream_->Shutdown(SHUT_WR);
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Seconds(2));
    }
    stream_->Shutdown(SHUT_RDWR);
    reader_.join();
    stream_.reset();
  }

 private:
  std::unique_ptr<ByteStream> stream_;
  const TcpFrameKind kind_;
  std::string scratch_;  // used by the (serialized) writer only
  std::thread reader_;
  std::atomic<bool> finishing_{false};
  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

class TcpDialer : public Dialer {
 public:
  TcpDialer(HostPort target, TcpFrameKind kind, std::string peer, AckHandler on_ack)
      : target_(std::move(target)), kind_(kind), peer_(std::move(peer)), on_ack_(std::move(on_ack)) {}
  absl::StatusOr<std::unique_ptr<Connection>> Dial(std::chrono::milliseconds timeout) override {
    auto fd = ConnectTcp(target_, timeout);
    if (!fd.ok()) return fd.status();
    // TLS (when the process has an identity) takes its own handshake time.
    auto stream = ClientStream(std::move(*fd), target_.host, std::max(timeout, kHandshakeTimeout));
    if (!stream.ok()) return stream.status();
    return std::unique_ptr<Connection>(
        new TcpConnection(std::move(*stream), kind_, peer_, on_ack_));
  }

 private:
  const HostPort target_;
  const TcpFrameKind kind_;
  const std::string peer_;
  const AckHandler on_ack_;
};

std::string PeerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  char host[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    return absl::StrCat("[", host, "]:", ntohs(a->sin6_port));
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
  return absl::StrCat(host, ":", ntohs(a->sin_port));
}

}  // namespace

std::unique_ptr<ActivationSender> MakeTcpActivationSender(const HostPort& target,
                                                          const SenderOptions& options) {
  const std::string peer = absl::StrCat("next stage at tcp://", target.ToString());
  return std::make_unique<NetworkActivationSender>(
      peer,
      [target, peer](AckHandler on_ack) {
        return std::make_unique<TcpDialer>(target, TcpFrameKind::kActivation, peer,
                                           std::move(on_ack));
      },
      options);
}

std::unique_ptr<ResultSender> MakeTcpResultSender(const HostPort& target,
                                                  const SenderOptions& options) {
  const std::string peer = absl::StrCat("coordinator at tcp://", target.ToString());
  return std::make_unique<NetworkResultSender>(
      peer, std::make_unique<TcpDialer>(target, TcpFrameKind::kResult, peer, nullptr), options);
}

// ---------------------------------------------------------------- server

struct TcpFrameServer::Connection {
  Fd fd;                                // until Serve wraps it into `stream`
  int socket = -1;                      // for shutdown(2) from other threads
  std::unique_ptr<ByteStream> stream;   // owned by the Serve thread while it runs
  std::string peer;
  std::chrono::steady_clock::time_point accepted;
  std::thread thread;
  std::atomic<bool> proven{false};      // it delivered a frame the handler accepted
  std::atomic<bool> done{false};
};

absl::StatusOr<std::unique_ptr<TcpFrameServer>> TcpFrameServer::Start(const std::string& listen,
                                                                      std::string name,
                                                                      Handler handler,
                                                                      int max_connections) {
  auto hp = ParseHostPort(listen);
  if (!hp.ok()) {
    return absl::Status(hp.status().code(), absl::StrCat(name, ": ", hp.status().message()));
  }
  std::unique_ptr<TcpFrameServer> s(new TcpFrameServer());
  s->name_ = std::move(name);
  s->handler_ = std::move(handler);
  s->max_connections_ = std::max(1, max_connections);
  auto fd = ListenTcp(*hp, &s->port_);
  if (!fd.ok()) {
    return absl::Status(fd.status().code(), absl::StrCat(s->name_, ": ", fd.status().message()));
  }
  s->listen_fd_ = std::move(*fd);
  s->accept_thread_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

TcpFrameServer::~TcpFrameServer() { Shutdown(); }

int TcpFrameServer::open_connections() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& c : connections_) n += c->done.load() ? 0 : 1;
  return n;
}

void TcpFrameServer::CloseConnections() {
  absl::MutexLock lock(&mu_);
  for (auto& c : connections_) ::shutdown(c->socket, SHUT_RDWR);
}

void TcpFrameServer::ReapLocked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->done.load()) {
      if ((*it)->thread.joinable()) (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void TcpFrameServer::AcceptLoop() {
  while (!stopping_.load()) {
    Fd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) {
      if (stopping_.load()) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        spdlog::warn("{}: accept: {}", name_, std::strerror(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      if (!stopping_.load()) spdlog::error("{}: accept failed: {}", name_, std::strerror(errno));
      return;
    }
    ConfigureDataSocket(fd.get());
    absl::MutexLock lock(&mu_);
    ReapLocked();
    const std::string peer = PeerName(fd.get());
    if (static_cast<int>(connections_.size()) >= max_connections_) {
      // Full: make room by dropping the oldest connection that never delivered a frame
      // (idle or hostile connections must not lock out the pipeline's own), else refuse.
      Connection* idle = nullptr;
      for (auto& c : connections_) {
        if (!c->proven.load() && !c->done.load() && (!idle || c->accepted < idle->accepted)) {
          idle = c.get();
        }
      }
      if (idle == nullptr) {
        spdlog::warn("{}: refusing a connection from {}: {} connections already open", name_,
                     peer, connections_.size());
        continue;  // fd closes here
      }
      spdlog::warn("{}: dropping {} (no frame yet) to make room for {}", name_, idle->peer, peer);
      ::shutdown(idle->socket, SHUT_RDWR);
    }
    auto c = std::make_unique<Connection>();
    c->socket = fd.get();
    c->fd = std::move(fd);
    c->peer = peer;
    c->accepted = std::chrono::steady_clock::now();
    Connection* raw = c.get();
    connections_.push_back(std::move(c));
    raw->thread = std::thread([this, raw] { Serve(raw); });
  }
}

void TcpFrameServer::Serve(Connection* c) {
  auto stream = ServerStream(std::move(c->fd), kHandshakeTimeout);
  if (!stream.ok()) {
    if (!stopping_.load()) {
      spdlog::warn("{}: connection from {} closed: {}", name_, c->peer, stream.status().message());
    }
    ::shutdown(c->socket, SHUT_RDWR);
    c->done.store(true);
    return;
  }
  c->stream = std::move(*stream);
  ByteStream& s = *c->stream;
  std::string scratch;
  const Reply reply = [&s, &scratch](TcpFrameKind kind, const google::protobuf::MessageLite& m) {
    return WriteFrame(s, kind, m, &scratch);
  };
  TcpFrameKind kind;
  std::string body;
  // A new connection must start its first frame soon; after that an idle link is normal.
  const auto first_deadline = std::chrono::steady_clock::now() + kHandshakeTimeout;
  while (!stopping_.load()) {
    auto got = ReadFrame(s, kMaxMessageBytes, &kind, &body, std::chrono::seconds(30),
                         c->proven.load() ? nullptr : &first_deadline);
    if (!got.ok()) {
      if (!stopping_.load()) {
        spdlog::warn("{}: connection from {} closed: {}", name_, c->peer, got.status().message());
      }
      break;
    }
    if (*got == ReadOutcome::kClosed) break;
    if (absl::Status st = handler_(kind, body, c->peer, reply); !st.ok()) {
      spdlog::warn("{}: connection from {} closed: {}", name_, c->peer, st.message());
      break;
    }
    c->proven.store(true);
  }
  // The peer sees the end of the stream now; the descriptor is closed when reaped.
  s.Shutdown(SHUT_RDWR);
  c->done.store(true);
}

void TcpFrameServer::Shutdown() {
  if (stopping_.exchange(true)) return;
  if (listen_fd_) ::shutdown(listen_fd_.get(), SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  absl::MutexLock lock(&mu_);
  for (auto& c : connections_) ::shutdown(c->socket, SHUT_RDWR);
  for (auto& c : connections_) {
    if (c->thread.joinable()) c->thread.join();
  }
  connections_.clear();
  listen_fd_.reset();
}

// ---------------------------------------------------------------- dispatch

TcpFrameServer::Handler DataPlaneHandler(DataPlaneHandlers handlers) {
  return [h = std::move(handlers)](TcpFrameKind kind, const std::string& body,
                                   const std::string& peer,
                                   const TcpFrameServer::Reply& reply) -> absl::Status {
    if (kind == TcpFrameKind::kActivation && h.frames != nullptr) {
      v1::ActivationFrame frame;
      if (!frame.ParseFromString(body)) {
        return absl::InvalidArgumentError(
            absl::StrCat("undecodable activation frame (", body.size(), " bytes)"));
      }
      auto delivered = h.frames->Deliver(frame, peer);
      if (!delivered.ok()) return delivered.status();  // wrong key: drop the connection
      if (!*delivered) return absl::OkStatus();
      if (absl::Status w = reply(TcpFrameKind::kAck, **delivered); !w.ok()) {
        return absl::UnavailableError(absl::StrCat("cannot answer the rejection: ", w.message()));
      }
      return absl::OkStatus();
    }
    if (kind == TcpFrameKind::kResult && h.results) {
      v1::StepResult result;
      if (!result.ParseFromString(body)) {
        return absl::InvalidArgumentError(
            absl::StrCat("undecodable step result (", body.size(), " bytes)"));
      }
      return h.results(result, peer);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("a ", TcpFrameKindName(kind), " frame is not taken on this data port"));
  };
}

}  // namespace cascade
