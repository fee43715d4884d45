#include "transport/tcp_wire.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cascade {
namespace {

using Clock = std::chrono::steady_clock;

void PutU16(char* p, uint16_t v) {
  p[0] = static_cast<char>(v & 0xff);
  p[1] = static_cast<char>(v >> 8);
}
void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint16_t GetU16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t GetU32(const unsigned char* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

std::string Errno(int err) { return std::strerror(err); }

// Reads into buf until *done == n. `what` and `total` (the part's whole size, which a
// buffer growing in steps does not hold yet) name the bytes in errors. Fails when no byte
// arrives for `stall` (a stalled peer), not when a large frame simply takes long.
absl::Status ReadExact(ByteStream& stream, char* buf, size_t n, size_t total,
                       std::chrono::milliseconds stall, const char* what, size_t* done) {
  while (*done < n) {
    const Clock::time_point deadline = Clock::now() + stall;
    auto got = stream.Read(buf + *done, n - *done, &deadline);
    if (!got.ok()) return got.status();
    if (*got == 0) {
      return absl::DataLossError(absl::StrCat("connection closed inside a frame's ", what,
                                              " after ", *done, " of ", total, " bytes"));
    }
    *done += *got;
  }
  return absl::OkStatus();
}

}  // namespace

const char* TcpFrameKindName(TcpFrameKind kind) {
  switch (kind) {
    case TcpFrameKind::kActivation:
      return "activation";
    case TcpFrameKind::kAck:
      return "ack";
    case TcpFrameKind::kResult:
      return "result";
  }
  return "unknown";
}

void ConfigureDataSocket(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int idle = 10, interval = 2, count = 3;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  // A peer that stops reading (stopped, or its machine gone) must not hold a writer
  // forever: a send blocked this long fails and the link counts as down.
  timeval send_timeout{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
}

absl::StatusOr<Fd> ConnectTcp(const HostPort& to, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(to.port);
  const std::string peer = absl::StrCat(to.host, ":", to.port);
  if (int rc = ::getaddrinfo(to.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", peer, ": ", ::gai_strerror(rc)));
  }
  std::string last_error = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) {
      last_error = Errno(errno);
      continue;
    }
    int rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd.get(), POLLOUT, 0};
      rc = left > 0 ? ::poll(&p, 1, static_cast<int>(left)) : 0;
      if (rc <= 0) {
        last_error = "timed out";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last_error = Errno(err);
        continue;
      }
    } else if (rc < 0) {
      last_error = Errno(errno);
      continue;
    }
    const int flags = ::fcntl(fd.get(), F_GETFL, 0);
    ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    ConfigureDataSocket(fd.get());
    ::freeaddrinfo(found);
    return fd;
  }
  ::freeaddrinfo(found);
  return absl::UnavailableError(absl::StrCat("cannot connect to ", peer, ": ", last_error));
}

absl::StatusOr<Fd> ListenTcp(const HostPort& at, int* bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(at.port);
  const char* host = at.host.empty() || at.host == "*" ? nullptr : at.host.c_str();
  if (int rc = ::getaddrinfo(host, port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve listen address ", at.host, ": ", ::gai_strerror(rc)));
  }
  std::string last_error = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) {
      last_error = Errno(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) < 0 || ::listen(fd.get(), 64) < 0) {
      last_error = Errno(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    *bound_port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                           : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    ::freeaddrinfo(found);
    return fd;
  }
  ::freeaddrinfo(found);
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", at.host, ":", at.port, ": ", last_error));
}

absl::Status WriteFrame(ByteStream& stream, TcpFrameKind kind,
                        const google::protobuf::MessageLite& msg, std::string* scratch) {
  const size_t body = msg.ByteSizeLong();
  if (body > UINT32_MAX) return absl::InvalidArgumentError("message too large for one frame");
  scratch->resize(kTcpHeaderBytes + body);
  char* p = scratch->data();
  PutU32(p, kTcpWireMagic);
  PutU16(p + 4, kTcpWireVersion);
  PutU16(p + 6, static_cast<uint16_t>(kind));
  PutU32(p + 8, static_cast<uint32_t>(body));
  msg.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(p + kTcpHeaderBytes));
  return stream.Write(p, scratch->size());
}

absl::StatusOr<ReadOutcome> ReadFrame(ByteStream& stream, size_t max_body, TcpFrameKind* kind,
                                      std::string* body, std::chrono::milliseconds stall_timeout,
                                      const Clock::time_point* start_deadline) {
  char header[kTcpHeaderBytes];
  auto first = stream.Read(header, kTcpHeaderBytes, start_deadline);
  if (!first.ok() && first.status().code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::DeadlineExceededError("no frame arrived in time on a new connection");
  }
  if (!first.ok()) return first.status();
  if (*first == 0) return ReadOutcome::kClosed;
  size_t done = *first;
  if (absl::Status st =
          ReadExact(stream, header, kTcpHeaderBytes, kTcpHeaderBytes, stall_timeout, "header",
                    &done);
      !st.ok()) {
    return st;
  }
  const auto* h = reinterpret_cast<const unsigned char*>(header);
  if (const uint32_t magic = GetU32(h); magic != kTcpWireMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frame header: magic 0x", absl::Hex(magic, absl::kZeroPad8),
        " is not a Cascade data-plane frame (0x", absl::Hex(kTcpWireMagic, absl::kZeroPad8), ")"));
  }
  if (const uint16_t version = GetU16(h + 4); version != kTcpWireVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frame header: version ", version, " is not the supported version ", kTcpWireVersion));
  }
  const uint16_t k = GetU16(h + 6);
  if (k < static_cast<uint16_t>(TcpFrameKind::kActivation) ||
      k > static_cast<uint16_t>(TcpFrameKind::kResult)) {
    return absl::InvalidArgumentError(absl::StrCat("frame header: unknown kind ", k));
  }
  const uint32_t length = GetU32(h + 8);
  if (length > max_body) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame header: body of ", length, " bytes exceeds the limit of ", max_body));
  }
  *kind = static_cast<TcpFrameKind>(k);
  // Grow the buffer only as bytes arrive.
  constexpr size_t kStep = size_t{1} << 20;
  body->clear();
  size_t got = 0;
  while (got < length) {
    if (body->size() == got) body->resize(std::min<size_t>(length, std::max(kStep, got * 2)));
    if (absl::Status st =
            ReadExact(stream, body->data(), body->size(), length, stall_timeout, "body", &got);
        !st.ok()) {
      return st;
    }
  }
  body->resize(length);
  return ReadOutcome::kFrame;
}

}  // namespace cascade
