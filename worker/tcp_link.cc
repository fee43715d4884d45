#include "worker/tcp_link.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "util/logging.h"
#include "worker/grpc_util.h"

namespace cascade {

// ---------------------------------------------------------------- TcpLink

// State shared by a connection's reader thread and the link.
struct TcpLink::Reader {
  std::atomic<bool> broken{false};
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // guarded by mu
};

TcpLink::TcpLink(std::string address, std::string peer_name,
                 std::chrono::milliseconds connect_timeout, OnFrame on_frame)
    : address_(std::move(address)),
      peer_(std::move(peer_name)),
      connect_timeout_(connect_timeout),
      on_frame_(std::move(on_frame)) {}

TcpLink::~TcpLink() { Close(); }

absl::Status TcpLink::Connect() {
  auto hp = ParseHostPort(address_);
  if (!hp.ok()) return hp.status();
  const auto deadline = std::chrono::steady_clock::now() + connect_timeout_;
  absl::Status last = absl::UnavailableError(absl::StrCat(peer_, " is unreachable"));
  for (;;) {
    if (closing_.load())
      return absl::UnavailableError(absl::StrCat("link to ", peer_, " is closing"));
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return absl::UnavailableError(absl::StrCat(peer_, " is unreachable: ", last.message()));
    }
    const auto slice = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(100),
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
    const auto slice_end = now + slice;
    auto fd = ConnectTcp(*hp, slice);
    if (fd.ok()) {
      fd_ = std::move(*fd);
      break;
    }
    last = fd.status();
    // A refused connection returns at once: wait out the slice instead of spinning.
    std::this_thread::sleep_until(slice_end);
  }
  reader_ = std::make_shared<Reader>();
  reader_thread_ = std::thread([fd = fd_.get(), r = reader_, cb = on_frame_, peer = peer_] {
    TcpFrameKind kind;
    std::string body;
    for (;;) {
      auto got = ReadFrame(fd, kMaxMessageBytes, &kind, &body);
      if (!got.ok()) {
        spdlog::warn("data link to {} broke: {}", peer, got.status().message());
        break;
      }
      if (*got == ReadOutcome::kClosed) break;
      if (cb) cb(kind, body);
    }
    r->broken.store(true);
    std::lock_guard<std::mutex> lock(r->mu);
    r->done = true;
    r->cv.notify_all();
  });
  return absl::OkStatus();
}

void TcpLink::Disconnect() {
  if (fd_) ::shutdown(fd_.get(), SHUT_RDWR);
  if (reader_thread_.joinable()) reader_thread_.join();
  fd_.reset();
  reader_.reset();
}

absl::Status TcpLink::Send(TcpFrameKind kind, const google::protobuf::MessageLite& msg) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return absl::UnavailableError("link is closed");
  if (fd_ && reader_->broken.load()) {
    spdlog::warn("link to {} broke; reconnecting", peer_);
    Disconnect();
  }
  if (!fd_) {
    if (absl::Status st = Connect(); !st.ok()) return st;
  }
  if (absl::Status st = WriteFrame(fd_.get(), kind, msg, &scratch_); !st.ok()) {
    reader_->broken.store(true);
    return absl::UnavailableError(absl::StrCat("link to ", peer_, " is down: ", st.message()));
  }
  return absl::OkStatus();
}

void TcpLink::Close() {
  closing_.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  if (!fd_) return;
  // Let the peer read everything sent, then see the end of the stream and close its side.
  ::shutdown(fd_.get(), SHUT_WR);
  {
    std::unique_lock<std::mutex> rl(reader_->mu);
    reader_->cv.wait_for(rl, std::chrono::seconds(5), [&] { return reader_->done; });
  }
  Disconnect();
}

// ---------------------------------------------------------------- senders

TcpActivationSender::TcpActivationSender(std::string address,
                                         std::chrono::milliseconds connect_timeout)
    : rejected_(std::make_shared<std::atomic<uint64_t>>(0)),
      link_(address, "next stage at " + address, connect_timeout,
            [rejected = rejected_, address](TcpFrameKind kind, const std::string& body) {
              v1::FrameAck ack;
              if (kind != TcpFrameKind::kAck || !ack.ParseFromString(body)) {
                spdlog::warn("stage at {} sent an unexpected {} frame", address,
                             TcpFrameKindName(kind));
                return;
              }
              if (!ack.error().empty()) {
                rejected->fetch_add(1);
                spdlog::warn("stage at {} rejected batch {}: {}", address, ack.batch_id(),
                             ack.error());
              }
            }) {}

absl::Status TcpActivationSender::Send(StageFrame frame) {
  std::lock_guard<std::mutex> lock(mu_);
  EncodeFrame(frame, &wire_);
  return link_.Send(TcpFrameKind::kActivation, wire_);
}

TcpResultSender::TcpResultSender(std::string address, std::chrono::milliseconds connect_timeout)
    : link_(address, "coordinator at " + address, connect_timeout,
            [address](TcpFrameKind kind, const std::string&) {
              spdlog::warn("coordinator at {} sent an unexpected {} frame", address,
                           TcpFrameKindName(kind));
            }) {}

absl::Status TcpResultSender::Send(StepResult result) {
  std::lock_guard<std::mutex> lock(mu_);
  EncodeResult(result, &wire_);
  return link_.Send(TcpFrameKind::kResult, wire_);
}

std::unique_ptr<ActivationSender> MakeActivationSender(const std::string& address) {
  if (IsTcpAddress(address)) return std::make_unique<TcpActivationSender>(address);
  return std::make_unique<GrpcActivationSender>(address);
}

std::unique_ptr<ResultSender> MakeResultSender(const std::string& address) {
  if (IsTcpAddress(address)) return std::make_unique<TcpResultSender>(address);
  return std::make_unique<GrpcResultSender>(address);
}

// ---------------------------------------------------------------- server

struct TcpFrameServer::Connection {
  Fd fd;
  std::string peer;
  std::thread thread;
  std::atomic<bool> done{false};
};

namespace {

std::string PeerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "unknown peer";
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return absl::StrCat("[", host, "]:", port);
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
  port = ntohs(a->sin_port);
  return absl::StrCat(host, ":", port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpFrameServer>> TcpFrameServer::Start(const std::string& listen,
                                                                      std::string name,
                                                                      Handler handler,
                                                                      int max_connections) {
  auto hp = ParseHostPort(listen);
  if (!hp.ok()) return hp.status();
  std::unique_ptr<TcpFrameServer> s(new TcpFrameServer());
  s->name_ = std::move(name);
  s->handler_ = std::move(handler);
  s->max_connections_ = std::max(1, max_connections);
  auto fd = ListenTcp(*hp, &s->port_);
  if (!fd.ok()) return fd.status();
  s->listen_fd_ = std::move(*fd);
  s->accept_thread_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

absl::StatusOr<std::unique_ptr<TcpFrameServer>> TcpFrameServer::StartBeside(
    const std::string& listen, const std::string& grpc_listen, std::string name, Handler handler) {
  const std::string at =
      listen.empty() ? grpc_listen.substr(0, grpc_listen.rfind(':')) + ":0" : listen;
  auto s = Start(at, name, std::move(handler));
  if (!s.ok())
    return absl::Status(s.status().code(), absl::StrCat(name, ": ", s.status().message()));
  return s;
}

std::string TcpFrameServer::AdvertisedAddress(const std::string& advertise) const {
  return absl::StrCat(kTcpScheme, advertise.substr(0, advertise.rfind(':')), ":", port_);
}

TcpFrameServer::~TcpFrameServer() { Shutdown(); }

int TcpFrameServer::open_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& c : connections_) n += c->done.load() ? 0 : 1;
  return n;
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
    std::lock_guard<std::mutex> lock(mu_);
    ReapLocked();
    const std::string peer = PeerName(fd.get());
    if (static_cast<int>(connections_.size()) >= max_connections_) {
      spdlog::warn("{}: refusing a connection from {}: {} connections already open", name_, peer,
                   connections_.size());
      continue;  // fd closes here
    }
    auto c = std::make_unique<Connection>();
    c->fd = std::move(fd);
    c->peer = peer;
    Connection* raw = c.get();
    connections_.push_back(std::move(c));
    raw->thread = std::thread([this, raw] { Serve(raw); });
  }
}

void TcpFrameServer::Serve(Connection* c) {
  const int fd = c->fd.get();
  std::string scratch;
  const Reply reply = [fd, &scratch](TcpFrameKind kind, const google::protobuf::MessageLite& m) {
    return WriteFrame(fd, kind, m, &scratch);
  };
  TcpFrameKind kind;
  std::string body;
  while (!stopping_.load()) {
    auto got = ReadFrame(fd, kMaxMessageBytes, &kind, &body);
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
  }
  // The peer sees the end of the stream now; the descriptor is closed when reaped.
  ::shutdown(fd, SHUT_RDWR);
  c->done.store(true);
}

void TcpFrameServer::Shutdown() {
  if (stopping_.exchange(true)) return;
  if (listen_fd_) ::shutdown(listen_fd_.get(), SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : connections_) ::shutdown(c->fd.get(), SHUT_RDWR);
  for (auto& c : connections_) {
    if (c->thread.joinable()) c->thread.join();
  }
  connections_.clear();
  listen_fd_.reset();
}

// ---------------------------------------------------------------- stage handler

TcpFrameServer::Handler ActivationHandler(StagePipeService* pipe) {
  return [pipe](TcpFrameKind kind, const std::string& body, const std::string& peer,
                const TcpFrameServer::Reply& reply) -> absl::Status {
    if (kind != TcpFrameKind::kActivation) {
      return absl::InvalidArgumentError(
          absl::StrCat("a ", TcpFrameKindName(kind), " frame on a stage's data port"));
    }
    v1::ActivationFrame frame;
    if (!frame.ParseFromString(body)) {
      return absl::InvalidArgumentError(
          absl::StrCat("undecodable activation frame (", body.size(), " bytes)"));
    }
    std::optional<v1::FrameAck> ack = pipe->Deliver(frame, peer);
    if (!ack) return absl::OkStatus();
    if (absl::Status w = reply(TcpFrameKind::kAck, *ack); !w.ok()) {
      return absl::UnavailableError(absl::StrCat("cannot answer the rejection: ", w.message()));
    }
    return absl::OkStatus();
  };
}

}  // namespace cascade
